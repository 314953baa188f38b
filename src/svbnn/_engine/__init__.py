"""svbnn's engine: how a spike-and-slab network's draw, KL and training step are computed.
Private; the public choice is the kernel backend (:class:`svbnn.KernelBackend`, the
``kernel_backend`` argument of :func:`svbnn.training.train` and of the estimators).

Modules, from the definitions to the paths that use them (DESIGN section 6.1):

* :mod:`~svbnn._engine.kernels`: the backend choice (a thread-scoped context variable) and
  the elementwise kernels, with the one definition of the KL and its derivatives
  (``kl_terms``); eager, or compiled by ``torch.compile``.
* :mod:`~svbnn._engine.fused_math`: the compiled fused kernel's counter-based noise and
  inline float32 math.
* :mod:`~svbnn._engine.native`: the C++ loops and their pybind11 bindings, one torch C++
  extension (built at install, verified before loading).
* :mod:`~svbnn._engine.paths`: which of a network's training-step paths applies.
* :mod:`~svbnn._engine.fused`: the fused draw + KL of a ``SpikeSlabMLP`` (autograd
  functions, the flat-weight layers, the per-model engine).
* :mod:`~svbnn._engine.graphs`: a small network's whole step as one compiled graph.
* :mod:`~svbnn._engine.native_step`: a network's whole step as one autograd node on the
  C++ loops.
"""
