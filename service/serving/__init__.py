"""Serving classify calls: the call itself, its key and classifier looked up, its texts checked
and charged (``classifying``), the memory-bounded cache of loaded models (``model_cache``),
micro-batched inference (``batching``), the loader pool that serves the tenants in turn
(``fair_loader``), the in-process cache of lookups (``lookup_cache``) and the invalidations
across API processes that keep it exact (``invalidation``)."""
