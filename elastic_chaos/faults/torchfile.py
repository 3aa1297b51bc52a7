"""A ``torch.save`` file read without torch: where each tensor's bytes lie, and which tensor they are.

``corrupt-checkpoint`` (elastic_chaos.faults.corrupt) flips bits inside a checkpoint's tensor
data, and the toolkit's process never imports torch (docs/ARCHITECTURE.md), so the file is read
here with the standard library. ``torch.save`` writes a zip archive whose members are stored,
never compressed: ``<archive>/data.pkl`` (the pickle of the object, each tensor a persistent
reference to a storage by key) and one member ``<archive>/data/<key>`` per storage, its raw bytes.

The tensor data is the region a silent corruption must hit: ``torch.load`` reads a member's bytes
without checking the zip's CRC-32 (torch 2.13, with and without ``mmap``), so a flipped bit there
loads as a different value and nothing fails. A flipped bit in the pickle or in a zip header makes
every load fail instead: that is a loud corruption, which the reference trainer already skips.

The pickle is read with an unpickler that calls nothing of torch's: each global it meets is
replaced by a stub that only records the storage a tensor names (the allow-list idea of
elastic_chaos.watchers.rdzv_state). A pickle with any other global leaves the tensors unnamed;
their bytes are still found.
"""
from __future__ import annotations

import io
import pickle
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DATA = re.compile(r"^(?P<archive>[^/]+)/data/(?P<key>[^/]+)$")
_LOCAL_HEADER = b"PK\x03\x04"
_LOCAL_HEADER_SIZE = 30

FLOATS: dict[str, tuple[int, int]] = {"FloatStorage": (4, 23), "DoubleStorage": (8, 52), "HalfStorage": (2, 10),
                                      "BFloat16Storage": (2, 7)}
"""Storage type -> (bytes per element, mantissa bits): a flip kept inside the mantissa changes a value in
its low digits and never makes it inf or NaN."""


class NotATorchFile(ValueError):
    """The file is not a zip archive written by ``torch.save`` (or its tensor data cannot be found)."""


@dataclass(frozen=True)
class Storage:
    """One tensor storage of a ``torch.save`` file: where its bytes lie and what it holds."""

    member: str
    """The zip member (``archive/data/3``)."""
    offset: int
    """The file offset of its first byte."""
    size: int
    """Its length in bytes."""
    kind: str | None
    """Its storage type (``FloatStorage``), None where the pickle could not be read."""
    tensors: tuple[str, ...]
    """The state's paths that view it (``model.0.weight``), () where unknown."""

    @property
    def name(self) -> str:
        return self.tensors[0] if self.tensors else self.member


def storages(path: Path) -> list[Storage]:
    """Every storage of the ``torch.save`` file at ``path``, in file order. NotATorchFile for another file;
    OSError as the file system raises it."""
    with open(path, "rb") as f:
        try:
            archive = zipfile.ZipFile(f)
        except zipfile.BadZipFile as exc:
            raise NotATorchFile(f"{path.name} is not a zip archive (torch.save's format): {exc}") from None
        with archive:
            infos = [i for i in archive.infolist() if _DATA.match(i.filename)]
            if not infos:
                raise NotATorchFile(f"{path.name} holds no tensor data (no <archive>/data/<key> member)")
            names = _tensor_names(archive, _DATA.match(infos[0].filename)["archive"])  # type: ignore[index]
            return [_storage(f, info, names) for info in sorted(infos, key=lambda i: i.header_offset)]


def _storage(f: io.BufferedReader, info: zipfile.ZipInfo, names: dict[str, tuple[str, list[str]]]) -> Storage:
    if info.compress_type != zipfile.ZIP_STORED:
        raise NotATorchFile(f"{info.filename} is compressed: not written by torch.save")
    f.seek(info.header_offset)
    header = f.read(_LOCAL_HEADER_SIZE)
    if len(header) < _LOCAL_HEADER_SIZE or not header.startswith(_LOCAL_HEADER):
        raise NotATorchFile(f"no zip local header for {info.filename} at offset {info.header_offset}")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    key = _DATA.match(info.filename)["key"]  # type: ignore[index]
    kind, tensors = names.get(key, (None, []))
    return Storage(info.filename, info.header_offset + _LOCAL_HEADER_SIZE + name_len + extra_len, info.file_size,
                   kind, tuple(sorted(tensors)))


# -- naming the tensors: the pickle, read with stubs -------------------------------------
@dataclass(frozen=True)
class _Ref:
    key: str
    kind: str


@dataclass(frozen=True)
class _Kind:
    name: str


class _Dict(dict[Any, Any]):
    """Stands for OrderedDict: takes the ``_metadata`` attribute a state_dict carries."""


def _rebuild(storage: object, *_args: object) -> object:
    return storage  # a tensor is its storage reference, for naming


class _Stubs(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name.startswith("_rebuild_"):
            return _rebuild
        if module == "torch" and name.endswith("Storage"):
            return _Kind(name)
        if module == "torch":
            return name   # a dtype or a device named in the state (torch.float32): its name
        if (module, name) == ("collections", "OrderedDict"):
            return _Dict
        raise pickle.UnpicklingError(f"{module}.{name} is not a torch.save global")

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage" and isinstance(pid[1], _Kind):
            return _Ref(str(pid[2]), pid[1].name)
        raise pickle.UnpicklingError(f"persistent id {pid!r}")


def _tensor_names(archive: zipfile.ZipFile, prefix: str) -> dict[str, tuple[str, list[str]]]:
    """Storage key -> (its storage type, the paths of the tensors that view it); {} where the pickle
    holds what the stubs do not know."""
    try:
        state = _Stubs(io.BytesIO(archive.read(f"{prefix}/data.pkl"))).load()
    except Exception:  # noqa: BLE001 - any pickle the stubs cannot read leaves the tensors unnamed
        return {}
    out: dict[str, tuple[str, list[str]]] = {}
    for path, ref in _refs(state, ""):
        out.setdefault(ref.key, (ref.kind, []))[1].append(path)
    return out


def _refs(value: object, path: str) -> list[tuple[str, _Ref]]:
    if isinstance(value, _Ref):
        return [(path, value)]
    if isinstance(value, dict):
        items: list[tuple[object, object]] = list(value.items())
    elif isinstance(value, list | tuple):
        items = list(enumerate(value))
    else:
        return []
    return [found for k, v in items for found in _refs(v, f"{path}.{k}" if path else str(k))]
