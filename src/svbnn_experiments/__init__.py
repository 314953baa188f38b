"""Reproduction harness for the paper's tables and figures (the ``svbnn reproduce`` command).

The application layer on top of the library: it may print and draw figures; the library
never imports it. Importing this package registers every artifact:

* ``simulations``: Table 1 (dense and sparse teacher), Table 2, the coverage table;
* ``sweeps``: the lambda sweeps of Figures 1, 2 and supplement Figure 7;
* ``figures``: the selected network, the linear toy and the Gumbel convergence figure;
* ``uci``, ``mnist``, ``mnist_uq``, ``fmnist``: the real-data artifacts (``uci``, ``mnist``,
  ``mnist-uq``, ``fmnist-cnn``; ``classifiers`` and ``classifier_runs`` hold what the last
  three share);
* ``baseline_methods``, ``pruned_methods``: VBNN, VD and HS-BNN; AGP and LOT, as methods of
  the simulation artifacts (``pruned_networks``: the replicated plain networks they prune).

New artifacts (e.g. real-data ones) register with :func:`register_artifact` in a module
imported below; new methods with :func:`svbnn_experiments.methods.register_method`.
"""

# isort: off
# Import order is the order of `svbnn reproduce --list`; importing registers the artifacts.
from . import simulations, coverage_table, sweeps, figures, uci, mnist, mnist_uq, fmnist  # noqa: F401
from . import baseline_methods, pruned_methods  # noqa: F401

# isort: on
from .methods import METHOD_NAMES, available_methods, get_method, register_method
from .registry import ARTIFACTS, Artifact, Timing, artifact_names, get_artifact, register_artifact
from .runner import estimate, list_text, reproduce, resolve_config

__all__ = [
    "ARTIFACTS",
    "METHOD_NAMES",
    "Artifact",
    "Timing",
    "artifact_names",
    "available_methods",
    "estimate",
    "get_artifact",
    "get_method",
    "list_text",
    "register_artifact",
    "register_method",
    "reproduce",
    "resolve_config",
]
