"""Caches shared beyond one machine, and keeping stores tidy: the remote cache (:mod:`~compiler.cache.remote`), the
remote tier every cached stage is handed (:mod:`~compiler.cache.reuse`), ``--explain`` of cache misses
(:mod:`~compiler.cache.explain`) and ``compile gc`` (:mod:`~compiler.cache.cache_gc`)."""
