"""A rates file read back (``rates.json``, written by :mod:`wneurons.experiment.rates` from a run's benchmark
tables): the measured work per second of a (rule, precision, device), for the planner
(:class:`wneurons.experiment.allocations.Planner`). Apart from the module that measures, which needs the planner's
work measure: the planner imports this one, so neither imports the other's importer."""

from __future__ import annotations

import json
from pathlib import Path

UNKNOWN_DEVICE = "unknown"
# A rate's unit and its factor to work per second (the planner's FLOP/s or bytes/s).
UNITS = {"TFLOP/s": 1e12, "B/s": 1.0}


class MeasuredRates:
    """A rates file read back: the rate of one job's (rule, precision, model) on a device, in work per second."""

    def __init__(self, content: dict, source: str = "") -> None:
        self.content, self.source = content, source
        self._entries = {(e["rule"], e["precision"], e["device"]): e for e in content.get("rates", [])}

    @classmethod
    def load(cls, path: str | Path) -> MeasuredRates:
        try:
            content = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"rates file {path}: {err}".splitlines()[0]) from None
        if not isinstance(content, dict) or not isinstance(content.get("rates"), list):
            raise ValueError(f"rates file {path}: no list of rates (python perf/measured_rates.py writes one)")
        return cls(content, str(path))

    def devices(self) -> list[str]:
        return sorted({device for _, _, device in self._entries})

    def device_for(self, gpu_model: str | None) -> str | None:
        """The measured device a site's ``gpu_model`` names (its name within the device's, case aside: "h100" is
        "NVIDIA H100 80GB HBM3"); without one, the only device measured (jobs of an unknown device aside); else
        None."""
        devices = self.devices()
        if gpu_model is None:
            known = [d for d in devices if d != UNKNOWN_DEVICE] or devices
            return known[0] if len(known) == 1 else None
        named = [d for d in devices if gpu_model.lower() in d.lower()]
        return named[0] if named else None

    def rate(self, rule: str, precision: str, model: str, gpu_model: str | None) -> tuple[float, str] | None:
        """(work per second, source) of one job: its model's measured rate ("measured"), else the median over the
        models measured for the rule ("measured, rule median"); None where nothing was measured for it."""
        entry = self._entries.get((rule, precision, self.device_for(gpu_model)))
        if entry is None:
            return None
        scale = UNITS[entry["unit"]]
        if model in entry["models"]:
            return entry["models"][model]["rate"] * scale, "measured"
        return entry["median"] * scale, "measured, rule median"
