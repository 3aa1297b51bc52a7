"""The c10d store's measured costs the toolkit ships: the store model's calibration, one JSON file.

``python -m bench --store-model`` measures them (bench/rdzv/storebench.py: torch's TCPStore and state on the
measuring machine) and writes :data:`SHIPPED` with :func:`save`; :func:`load` reads them back for ``elastic-chaos
scale`` (elastic_chaos/scale/store_model.py turns them into the modelled load). Nothing else reads that file.
"""
from __future__ import annotations

import json
from pathlib import Path

from elastic_chaos.errors import SpecError
from elastic_chaos.scale.store_model import StoreCosts, costs_from_json, costs_to_json

SHIPPED = Path(__file__).with_name("store_costs.json")
COMMAND = "python -m bench --store-model"


def load(path: Path | None = None) -> StoreCosts:
    """The costs at ``path`` (default: the shipped ones). Raises SpecError saying how to measure them."""
    path = path or SHIPPED
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise TypeError("not a JSON object")
        return costs_from_json(raw)
    except FileNotFoundError:
        raise SpecError(f"no measured store costs at {path}: run `{COMMAND}` to measure them") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"cannot read the store costs at {path} ({type(exc).__name__}: {exc}); "
                        f"run `{COMMAND}` to measure them again") from None


def save(costs: StoreCosts, path: Path | None = None) -> Path:
    path = path or SHIPPED
    path.write_text(json.dumps(costs_to_json(costs), indent=1) + "\n")
    return path
