"""Shared test settings: one torch thread (the suite's timing budget assumes it)."""

import torch

torch.set_num_threads(1)
