"""MNIST and Fashion-MNIST: the official train/test split as stored, and its normalisation."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from numpy.typing import NDArray

from ._download import DataIntegrityError
from ._parse import _check_mnist, _read_mnist
from ._registry import CHECKSUMS, SOURCES
from ._store import _broken_file_hint, _download_hint, _ensure, _root, _verify

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "MNIST_MEAN",
    "MNIST_STD",
    "MNISTData",
    "load_mnist",
    "normalize_images",
]

logger = logging.getLogger(__name__)

# Normalisation constants (pixel scale [0, 1]). MNIST: the values the paper states
# (supplement, MNIST section); the measured train mean is 0.1307. Fashion-MNIST: measured
# train mean and std (data README).
MNIST_MEAN = 0.1306
MNIST_STD = 0.3081
FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530
FASHION_MNIST_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)


def normalize_images(
    images: NDArray[np.generic],
    mean: float = MNIST_MEAN,
    std: float = MNIST_STD,
    *,
    flatten: bool = True,
) -> NDArray[np.float32]:
    """Scale pixels to [0, 1], then standardise: ``(images / 255 - mean) / std``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
        Pixel values on the 0..255 scale (uint8 as stored).
    mean, std : float
        Normalisation constants on the [0, 1] scale (MNIST: 0.1306, 0.3081 as in the paper).
    flatten : bool
        ``True``: shape (n, H*W) for an MLP; ``False``: shape (n, 1, H, W) for a CNN.

    Returns
    -------
    ndarray of float32
    """
    if images.ndim != 3:
        raise ValueError(f"images must have shape (n, H, W), got {images.shape}")
    if not std > 0:
        raise ValueError(f"std must be positive, got {std}")
    # float32 throughout: the float64 detour would double the peak memory (~376 MB for MNIST).
    x = images.astype(np.float32)
    x *= np.float32(1.0 / 255.0)
    x -= np.float32(mean)
    x /= np.float32(std)
    n, h, w = images.shape
    return x.reshape(n, h * w) if flatten else x.reshape(n, 1, h, w)


@dataclass
class MNISTData:
    """MNIST or Fashion-MNIST with the official train/test split, as stored.

    Attributes
    ----------
    x_train : ndarray of uint8, shape (n_train, 28, 28)
        0 = background, 255 = ink.
    y_train : ndarray of uint8, shape (n_train,)
        Labels 0..9.
    x_test : ndarray of uint8, shape (n_test, 28, 28)
    y_test : ndarray of uint8, shape (n_test,)
    name : str
        ``"mnist"`` or ``"fashion_mnist"``.
    """

    x_train: NDArray[np.uint8]
    y_train: NDArray[np.uint8]
    x_test: NDArray[np.uint8]
    y_test: NDArray[np.uint8]
    name: str = "mnist"

    @property
    def default_mean(self) -> float:
        """Normalisation mean for this data set (pixel scale [0, 1])."""
        return FASHION_MNIST_MEAN if self.name == "fashion_mnist" else MNIST_MEAN

    @property
    def default_std(self) -> float:
        """Normalisation std for this data set (pixel scale [0, 1])."""
        return FASHION_MNIST_STD if self.name == "fashion_mnist" else MNIST_STD

    def to_numpy(
        self, mean: float | None = None, std: float | None = None, *, flatten: bool = True
    ) -> tuple[NDArray[np.float32], NDArray[np.int64], NDArray[np.float32], NDArray[np.int64]]:
        """Normalised inputs and int64 labels as numpy arrays.

        Parameters
        ----------
        mean, std : float, optional
            Default: :attr:`default_mean`, :attr:`default_std`.
        flatten : bool
            Inputs of shape (n, 784) if ``True``, else (n, 1, 28, 28).

        Returns
        -------
        X_train, y_train, X_test, y_test
        """
        m = self.default_mean if mean is None else mean
        s = self.default_std if std is None else std
        return (
            normalize_images(self.x_train, m, s, flatten=flatten),
            self.y_train.astype(np.int64),
            normalize_images(self.x_test, m, s, flatten=flatten),
            self.y_test.astype(np.int64),
        )

    def to_tensors(
        self,
        mean: float | None = None,
        std: float | None = None,
        *,
        flatten: bool = True,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Like :meth:`to_numpy`, as float32 / int64 torch tensors on ``device``."""
        arrays = self.to_numpy(mean, std, flatten=flatten)
        X_train, y_train, X_test, y_test = (torch.from_numpy(a).to(device) for a in arrays)
        return X_train, y_train, X_test, y_test


def _read_checked(
    path: Path, relpath: str, *, download: bool, base_url: str | None
) -> dict[str, NDArray[np.generic]]:
    """Read and check the MNIST file ``path`` (``relpath`` in the data folder).

    Raises
    ------
    DataIntegrityError
        When the file cannot be read or its arrays are not MNIST's; the message names the
        file and says what to do (download it again or delete it).
    """
    try:
        arrays = _read_mnist(path)
        _check_mnist(arrays, path)
    except DataIntegrityError as err:
        # Reached with verify=False (or a file accepted by hash yet unreadable, which would
        # mean a wrong registry entry): say which file and what to do.
        hint = _broken_file_hint(
            str(path),
            downloadable=download or _download_hint(relpath, base_url) is not None,
            hashed=relpath in CHECKSUMS,
        )
        raise DataIntegrityError(f"{err}. {hint}") from err
    logger.info(
        "loaded %s from %s: %d train, %d test",
        relpath,
        path,
        *(len(arrays[k]) for k in ("y_train", "y_test")),
    )
    return arrays


def _as_mnist_data(arrays: dict[str, NDArray[np.generic]], name: str) -> MNISTData:
    """The checked arrays of an MNIST-style file as :class:`MNISTData` (``uint8``)."""
    return MNISTData(
        x_train=np.asarray(arrays["x_train"], dtype=np.uint8),
        y_train=np.asarray(arrays["y_train"], dtype=np.uint8),
        x_test=np.asarray(arrays["x_test"], dtype=np.uint8),
        y_test=np.asarray(arrays["y_test"], dtype=np.uint8),
        name=name,
    )


def load_mnist(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    fashion: bool = False,
    verify: bool = True,
    download: bool = False,
    base_url: str | None = None,
    timeout: float = 60.0,
) -> MNISTData:
    """Load MNIST (``mnist.npz``) or Fashion-MNIST (``fashion_mnist.npz``).

    Parameters
    ----------
    data_dir : str or PathLike, optional
        Data folder; default ``SVBNN_DATA``, then the download cache ``~/.cache/svbnn``.
    fashion : bool
        Load Fashion-MNIST instead of MNIST.
    verify : bool
        Check the file's sha256 against :data:`CHECKSUMS` (once per process per file).
    download : bool
        Fetch the file when missing (MNIST: from the Keras URL; Fashion-MNIST: only from a
        mirror given by ``base_url`` / ``SVBNN_DATA_URL``).
    base_url : str, optional
        Mirror of the data folder to download from; default ``SVBNN_DATA_URL``.
    timeout : float
        Network timeout in seconds, for connecting and for each read; the whole download
        must also finish within ``timeout`` plus the file's registered size
        (:data:`svbnn.data.SIZES`) at 64 KiB/s, and stops at that size.

    Returns
    -------
    MNISTData
        60000 train and 10000 test images for the real files.

    Raises
    ------
    DataNotFoundError
        When the file is missing (and not downloaded).
    ChecksumError
        When its sha256 does not match.
    """
    relpath = "fashion_mnist.npz" if fashion else "mnist.npz"
    what = "Fashion-MNIST (fashion_mnist.npz)" if fashion else "MNIST (mnist.npz)"
    root, source = _root(data_dir)
    path = _ensure(
        root, source, relpath, what=what, download=download, base_url=base_url, timeout=timeout
    )
    if verify:
        _verify(path, relpath, downloadable=SOURCES.get(relpath) is not None)
    arrays = _read_checked(path, relpath, download=download, base_url=base_url)
    return _as_mnist_data(arrays, "fashion_mnist" if fashion else "mnist")
