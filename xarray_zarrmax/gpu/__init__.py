"""GPU: shards decoded onto a device, for ``device="cuda"``.

A task fetches its shard on the host exactly as the CPU path does (`xarray_zarrmax.read`), packs the compressed
chunks into a pinned buffer, copies them to the device in one transfer and decodes them there in one batched
nvCOMP call (`read`). The pipeline is written against the small `Device` interface (`device`); `HostDevice`
implements it with NumPy so CI runs the same logic without a GPU, and `cuda` implements it with CuPy and nvCOMP,
the only module that imports them, and only when ``get_device("cuda")`` is called (`select`).
"""

from xarray_zarrmax.gpu.device import Device, Event, HostDevice, PinnedPool
from xarray_zarrmax.gpu.read import device_decodable, read_selection_on
from xarray_zarrmax.gpu.select import get_device

__all__ = ["Device", "Event", "HostDevice", "PinnedPool", "device_decodable", "get_device", "read_selection_on"]
