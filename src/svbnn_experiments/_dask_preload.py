"""Dask worker preload of ``--cluster``: the worker ignores SIGINT.

Ctrl-C reaches the terminal's whole process group; only the ``svbnn`` process reports it
and closes the cluster (as the ``--jobs`` workers do), so a worker, including one Dask
restarts after a crash, must not print its own KeyboardInterrupt. Dask imports this module
in the worker process's main thread before the worker starts.
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
