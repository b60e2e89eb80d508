"""The profile error model's one mapping (ans.surfaces.profile_errors): every
core failure, by AGTP status and code, to one of the profile's codes and its
one HTTP status; bounded messages; Retry-After kept; 5xx never a 500."""

from __future__ import annotations

import pytest
from ans.protocol import errors as E
from ans.protocol.errors import AgtpError, ErrorCode

from ans.surfaces.profile_errors import (
    MAX_MESSAGE_CHARS,
    PROFILE_STATUS,
    ProfileCode,
    profile_code,
    profile_error,
)

# Every AgtpError class the core raises, with its default code.
CLASSES = [
    cls
    for cls in vars(E).values()
    if isinstance(cls, type) and issubclass(cls, AgtpError) and cls is not E.InvalidParameter
]


def test_each_profile_code_has_one_status_from_the_drafts_list() -> None:
    assert set(PROFILE_STATUS) == set(ProfileCode)
    assert set(PROFILE_STATUS.values()) == {400, 401, 403, 404, 409, 410, 429, 503}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_core_error_class_maps_into_the_profile(cls: type[AgtpError]) -> None:
    err = profile_error(cls("boom"), "c-1")
    assert err.status in PROFILE_STATUS.values()
    assert err.body["error"]["code"] in {str(c) for c in ProfileCode}
    assert err.status == PROFILE_STATUS[ProfileCode(err.body["error"]["code"])]
    assert err.body["error"]["detail"] == str(cls.code)
    assert err.status != 500


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (E.MalformedJson("x"), "invalid_request"),
        (E.BodyTooLarge("x"), "invalid_request"),
        (E.RequestTimeout("x"), "invalid_request"),
        (E.Unprocessable("x", code=ErrorCode.MISSPELLED_PARAMETER), "invalid_request"),
        (E.InvalidParameter("limit", "x"), "invalid_request"),
        (E.AuthenticationFailed("x", code=ErrorCode.TOKEN_EXPIRED), "unauthorized"),
        (E.SignatureInvalid("x"), "unauthorized"),
        (E.ScopeViolation("x"), "forbidden"),
        (E.ZoneViolation("x"), "forbidden"),
        (E.NotFound("x"), "not_found"),
        (E.Conflict("x"), "conflict"),
        (E.Conflict("x", code=ErrorCode.AGENT_SUSPENDED), "conflict"),
        (E.Conflict("x", code=ErrorCode.STALE_METADATA), "stale_metadata"),
        (E.Gone("x", code=ErrorCode.AGENT_RETIRED), "stale_metadata"),
        (E.Unavailable("x", code=ErrorCode.AGENT_SUSPENDED), "stale_metadata"),
        (E.RateLimited("x"), "rate_limited"),
        (E.StorageUnavailable("x"), "unavailable"),
        (E.ServerError("x"), "unavailable"),
    ],
)
def test_mapping(exc: AgtpError, code: str) -> None:
    assert profile_code(exc) == code


def test_retry_after_and_bounded_message() -> None:
    err = profile_error(E.RateLimited("slow down", headers=(("retry-after", "7"),)), "c-2")
    assert err.status == 429 and err.body["error"]["retry_after"] == 7
    assert ("retry-after", "7") in err.headers
    down = profile_error(E.StorageUnavailable("disk full"), "c-3")
    assert down.status == 503 and down.body["error"]["retry_after"] == 1
    assert ("retry-after", "1") in down.headers
    long = profile_error(E.BadRequest("y" * 10_000), "c-4")
    assert len(long.body["error"]["message"]) == MAX_MESSAGE_CHARS
    assert long.body["error"]["correlation_id"] == "c-4"
    assert long.body["error"]["retry_after"] is None
    auth = profile_error(
        E.AuthenticationFailed("no token", headers=(("www-authenticate", "Bearer"),)), "c"
    )
    assert auth.headers == (("www-authenticate", "Bearer"),)
