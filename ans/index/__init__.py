"""The capability index: which agents can do what an intent asks.

Modules, top-down (a DISCOVER enters at :mod:`.capability`):

* :mod:`.capability` - :class:`CapabilityIndex`, the thread-safe facade:
  upsert/remove, query, equivalence, save/load.
* :mod:`.scoring` - fusion of the components, tag scores, :class:`QueryScores`
  and its evidence.
* :mod:`.approximate` - the exact/approximate (FAISS) mode switch and a
  query's candidates.
* :mod:`.restricted` - ``capability_domains`` queries (allowed facets only).
* :mod:`.facet_file` - every agent's facet sums on disk, for those queries.
* :mod:`.equivalence` - routing alternatives (``preferred_agent``).
* :mod:`.snapshot` - the on-disk snapshot.
* :mod:`.slots` - per-slot storage of vectors, flags and postings.
* :mod:`.profiles` - what an agent is matched on, and its vectors.
* :mod:`.embedder` - text -> vectors (WordLlama by default).

The storage components it builds on stay at the top of ``ans``:
:mod:`ans.index.int8_rows` (int8 vector rows), :mod:`ans.examples_index`,
:mod:`ans.lexical` (BM25), :mod:`ans.postings`, :mod:`ans.ann` (FAISS).
``ans.matcher`` re-exports the public names for existing callers.
"""
