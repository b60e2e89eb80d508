"""Load-test and benchmark tooling (catalog synthesis, a server launcher): not in the wheel."""
