"""Try a dialplan without a phone: ``openclaw-voice dialplan simulate``.

Two front ends drive a :class:`~agent.tools.simulated_call.SimulatedCall` (the dialogue engine
carrying out its actions minus audio):

* :func:`run_interactive` (here): the user types what the caller says; ``#1`` (or ``#1234#``)
  presses keys, an empty line is silence (a no-input timeout), ``/vars`` shows the variables,
  ``/quit`` ends.
* :func:`~agent.tools.simulation_script.run_script`: a YAML file of scenarios (turns with expected
  replies, see ``docs/dialplans.md``) for CI; returns non-zero when a reply does not match,
  printing what was expected and what the agent said.
"""

from __future__ import annotations

import sys
from typing import Iterable, TextIO

from agent.tools.simulated_call import Output, RealWebhooks, SimulatedCall, parse_now
from agent.tools.simulation_script import ScriptError, load_script, run_script

__all__ = [
    "Output",
    "RealWebhooks",
    "ScriptError",
    "SimulatedCall",
    "load_script",
    "parse_now",
    "run_interactive",
    "run_script",
]


HELP = (
    "Type what the caller says. '#1' presses 1 ('#1234#' several keys), an empty line is "
    "silence, /vars shows variables, /quit ends."
)


def run_interactive(
    call: SimulatedCall, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout
) -> int:
    """Run *call* reading caller input from *stdin*; 0 when the call ran, 1 when unrouted."""
    tty = stdin.isatty()

    def show(lines: Iterable[Output]) -> None:
        for line in lines:
            print(line.render(), file=stdout)
        stdout.flush()

    print(f"Simulating a call from {call.caller} to {call.number} (flow {call.flow}). {HELP}",
          file=stdout)
    show(call.start())
    if not call.routed:
        return 1
    while not call.ended:
        if tty:
            print("caller> ", end="", file=stdout, flush=True)
        line = stdin.readline()
        if not line:
            print("[end of input: the caller hung up]", file=stdout)
            break
        text = line.rstrip("\n")
        if not tty:
            print(f"caller> {text}", file=stdout)
        command = text.strip()
        if command == "/quit":
            print("[the caller hung up]", file=stdout)
            break
        if command == "/vars":
            for name, value in call.variables().items():
                print(f"  {name} = {value!r}", file=stdout)
            continue
        if command in ("/help", "/?"):
            print(HELP, file=stdout)
            continue
        if command.startswith("#") and len(command) > 1:
            show(call.dtmf(command[1:]))
        elif not command:
            show(call.silence())
        else:
            show(call.say(text))
    return 0
