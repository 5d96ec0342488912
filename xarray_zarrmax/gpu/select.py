"""The device a read decodes on, by name: the host (NumPy) or CUDA (CuPy + nvCOMP, which `cuda` imports only
when a device is made).

Apart from `device` (the interface and the NumPy stand-in) and `cuda` (its CUDA implementation, which imports
`device`), so that neither imports the other both ways.
"""

from __future__ import annotations

from xarray_zarrmax.gpu.cuda import cuda_device
from xarray_zarrmax.gpu.device import Device, HostDevice


def get_device(name: str) -> Device:
    """``"cpu"`` (NumPy) or ``"cuda"`` (CuPy + nvCOMP, imported only now)."""
    if name == "cpu":
        return HostDevice()
    if name == "cuda":
        return cuda_device()
    raise ValueError(f"device must be 'cpu' or 'cuda'. Got {name!r} instead.")
