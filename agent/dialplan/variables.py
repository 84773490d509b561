"""The variables a call's templates read: the call's own, and ``flow``, ``step`` and ``now.*``."""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Iterator, Mapping

from agent.dialplan.slots import WEEKDAYS

__all__ = ["CallScope", "call_variables"]


def call_variables(
    caller: str,
    called: str,
    call_id: str,
    region: str = "",
    config: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """Build the flat variable mapping templates read: ``caller`` ... and ``config.<key>``.

    Nested configuration mappings are flattened with dots (``config.speech.voice``); ``None``
    values are left out so a template using them counts as missing.
    """
    variables = {"caller": caller, "called": called, "call_id": call_id, "region": region}

    def flatten(prefix: str, value: object) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                flatten(f"{prefix}.{key}", item)
        elif value is not None:
            variables[prefix] = str(value)

    for key, value in (config or {}).items():
        flatten(f"config.{key}", value)
    return variables


class CallScope(Mapping[str, str]):
    """The variables a template sees: the call's *variables* (a live mapping, never copied),
    then ``flow`` and ``step`` (the current flow and step ids) and ``now.*`` (the local time,
    read only when a template asks for it)."""

    def __init__(
        self,
        variables: Mapping[str, str],
        flow: Callable[[], str],
        step: Callable[[], str],
        local_now: Callable[[], datetime],
    ) -> None:
        self._variables = variables
        self._flow = flow
        self._step = step
        self._local_now = local_now

    def __getitem__(self, key: str) -> str:
        if key in self._variables:
            return self._variables[key]
        if key == "flow":
            return self._flow()
        if key == "step":
            return self._step()
        if key == "now" or key.startswith("now."):
            local = self._local_now()
            parts = {
                "now": local.isoformat(timespec="seconds"),
                "now.date": local.date().isoformat(),
                "now.time": local.strftime("%H:%M"),
                "now.hour": str(local.hour),
                "now.minute": str(local.minute),
                "now.weekday": WEEKDAYS[local.weekday()],
                "now.day": str(local.day),
                "now.month": str(local.month),
                "now.year": str(local.year),
            }
            if key in parts:
                return parts[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._variables)

    def __len__(self) -> int:
        return len(self._variables)
