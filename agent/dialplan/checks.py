"""Checks a JSON Schema cannot state: references, variables, intents, routes and flow shape.

The loader records what each file declares and refers to (:class:`Declarations`); once every
file is read, these checks resolve the references across files and then judge the shape of the
flows: steps nothing leads to, loops nothing leads out of, routes an earlier one always takes.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

from agent.dialplan.model import (
    BUILTIN_VARIABLES,
    CONFIG_PREFIX,
    DialplanIssue,
    Flow,
    GotoStep,
    NumberPattern,
    Route,
    SayStep,
    Template,
    step_targets,
)
from agent.yamlmarks import Mark

__all__ = [
    "Declarations",
    "Reference",
    "check_intents",
    "check_loops",
    "check_reachability",
    "check_references",
    "check_routes",
    "check_variables",
    "sorted_unique",
]


@dataclass
class Reference:
    """A step id named somewhere in a flow, checked once all steps are known."""

    flow: str
    target: str
    key: str
    mark: Mark


@dataclass
class Declarations:
    """What one file (or, merged, all files) declares and refers to."""

    routes: list[Route] = field(default_factory=list)
    flows: dict[str, Flow] = field(default_factory=dict)
    references: list[Reference] = field(default_factory=list)
    route_marks: list[tuple[str, Mark]] = field(default_factory=list)
    flow_refs: list[tuple[str, str, Mark]] = field(default_factory=list)
    # Names declared, even by flows or steps that had errors (so those errors do not cascade
    # into "unknown step" reports wherever the broken step is referred to).
    declared_flows: set[str] = field(default_factory=set)
    declared_steps: dict[str, set[str]] = field(default_factory=dict)
    variables: set[str] = field(default_factory=set)
    prefixes: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    variable_uses: list[tuple[str, Mark, str]] = field(default_factory=list)
    intents: set[str] = field(default_factory=set)
    intent_uses: list[tuple[str, Mark]] = field(default_factory=list)
    defaults: list[tuple[str, Template]] = field(default_factory=list)
    had_errors: bool = False


def _unknown(what: str, name: str, known: Iterable[str], where: str = "") -> str:
    names = sorted(known)
    listed = ", ".join(names) if names else "(none)"
    message = f"refers to unknown {what} {name!r}{where}; expected one of: {listed}"
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


def check_references(merged: Declarations) -> Iterator[DialplanIssue]:
    """Every route flow, sub-flow and step named in a flow exists (in any of the files)."""
    declared_flows = merged.declared_flows
    for target, mark in merged.route_marks:
        if target not in declared_flows:
            yield DialplanIssue(mark, "'flow' " + _unknown("flow", target, declared_flows))
    for target, key, mark in merged.flow_refs:
        if target not in declared_flows:
            yield DialplanIssue(mark, f"'{key}' " + _unknown("flow", target, declared_flows))
    for ref in merged.references:
        ids = merged.declared_steps.get(ref.flow, set())
        if ref.target not in ids:
            if ref.flow not in declared_flows:
                continue  # reported as an unknown flow
            where = f" in flow {ref.flow!r}"
            yield DialplanIssue(ref.mark, f"'{ref.key}' " + _unknown("step", ref.target, ids, where))


def _variable_problem(name: str, merged: Declarations) -> str | None:
    """Why *name* is not a variable the dialplan can read, or None when it is."""
    if name in BUILTIN_VARIABLES or name in merged.variables:
        return None
    if name.startswith(CONFIG_PREFIX):
        return None
    if name == "config":
        return "expected 'config.<key>', found 'config' alone"
    for prefix, fields in merged.prefixes.items():
        if name.startswith(prefix + "."):
            if fields is None or name[len(prefix) + 1 :] in fields:
                return None
            listed = ", ".join(f"{prefix}.{f}" for f in fields)
            return (
                f"unknown variable {name!r}: the webhook saving as {prefix!r} declares only "
                f"these fields: {listed}"
            )
    known = sorted(BUILTIN_VARIABLES | merged.variables)
    message = (
        f"unknown variable {name!r}; no step sets it and it is not a call variable "
        "(caller, called, call_id, region, now.<part>, intent, input, ...) or config.<key>"
    )
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


def check_variables(merged: Declarations) -> Iterator[DialplanIssue]:
    for name, mark, what in merged.variable_uses:
        problem = _variable_problem(name, merged)
        if problem is not None:
            yield DialplanIssue(mark, f"in {what}: {problem}")


def check_intents(merged: Declarations) -> Iterator[DialplanIssue]:
    for name, mark in merged.intent_uses:
        if name not in merged.intents:
            yield DialplanIssue(mark, "condition " + _unknown("intent", name, merged.intents))


def check_routes(routes: Sequence[Route]) -> Iterator[DialplanIssue]:
    """Report routes that an earlier route (by priority, then order) always takes first."""
    ordered = sorted(routes, key=lambda r: r.priority)
    for i, route in enumerate(ordered):
        for earlier in ordered[:i]:
            if _shadows(earlier, route):
                yield DialplanIssue(
                    route.mark,
                    f"this route is never used: the route at {earlier.mark} takes every call "
                    "it would match (give this route a lower 'priority' or move it first)",
                )
                break


def _shadows(earlier: Route, later: Route) -> bool:
    def covers(a: NumberPattern | None, b: NumberPattern | None) -> bool:
        if a is None:
            return True
        if b is None:
            return False
        if b.is_literal:
            return a.matches(b.source)
        return a.source == b.source

    return covers(earlier.number, later.number) and covers(earlier.caller, later.caller)


def check_reachability(routes: Sequence[Route], flows: Mapping[str, Flow]) -> list[DialplanIssue]:
    issues: list[DialplanIssue] = []
    reached: set[tuple[str, str]] = set()
    pending: list[tuple[str, str]] = []
    used_flows: set[str] = set()

    def visit(flow_name: str | None, step_id: str | None) -> None:
        if flow_name is None or flow_name not in flows:
            return
        flow = flows[flow_name]
        used_flows.add(flow_name)
        target = step_id if step_id is not None else flow.steps[0].id
        if flow.has_step(target) and (flow_name, target) not in reached:
            reached.add((flow_name, target))
            pending.append((flow_name, target))

    for route in routes:
        visit(route.flow, None)
    while pending:
        flow_name, step_id = pending.pop()
        flow = flows[flow_name]
        for target_flow, target_step in step_targets(flow, flow.step(step_id)):
            visit(target_flow, target_step)
    for name, flow in flows.items():
        if name not in used_flows:
            issues.append(
                DialplanIssue(
                    flow.mark, f"flow {name!r} is never used: no route or 'goto' leads to it"
                )
            )
            continue
        for step in flow.steps:
            if (name, step.id) not in reached:
                label = f"step {step.id!r}" if not step.id.startswith("#") else "this step"
                issues.append(
                    DialplanIssue(
                        step.mark,
                        f"{label} in flow {name!r} is never reached: no earlier step, 'goto', "
                        "'next' or 'then' leads to it",
                    )
                )
    return issues


def check_loops(flows: Mapping[str, Flow]) -> list[DialplanIssue]:
    """Report loops that nothing leads out of (they would run forever).

    Each strongly connected group of steps from which no path reaches the end of the call is
    reported once, at the member written first.
    """
    nodes = [(name, step.id) for name, flow in flows.items() for step in flow.steps]
    edges: dict[tuple[str, str], list[tuple[str, str] | None]] = {}
    for name, flow in flows.items():
        for step in flow.steps:
            out: list[tuple[str, str] | None] = []
            for target_flow, target_step in step_targets(flow, step):
                if target_flow is None or target_flow not in flows:
                    out.append(None)
                else:
                    entry = target_step or flows[target_flow].steps[0].id
                    out.append((target_flow, entry))
            if isinstance(step, GotoStep) and step.flow is not None:
                out.append(None)  # the sub-flow may hang up or transfer; judged on its own
            edges[(name, step.id)] = out
    components = _strongly_connected(nodes, edges)
    issues: list[DialplanIssue] = []
    for component in components:
        members = set(component)
        looped = len(component) > 1 or any(e == component[0] for e in edges[component[0]])
        if not looped:
            continue
        leaves = any(e is None or e not in members for n in component for e in edges[n])
        if leaves:
            continue
        first = min(component, key=lambda n: (flows[n[0]].mark.path, flows[n[0]].step(n[1]).mark.line))
        cycle = [first]
        current = first
        while True:
            following = next(e for e in edges[current] if e in members and e is not None)
            if following in cycle:
                break
            cycle.append(following)
            current = following
        names = " -> ".join(step_id for _, step_id in cycle + [cycle[0]])
        step = flows[first[0]].step(first[1])
        if all(isinstance(flows[f].step(s), SayStep) for f, s in component):
            message = f"steps {names} repeat forever without asking the caller anything"
        else:
            message = (
                f"steps {names} loop forever: nothing in the loop leads out of it "
                "(add a way out such as a hangup, an ask's 'then' or a branch that leaves)"
            )
        issues.append(DialplanIssue(step.mark, message))
    return issues


def _strongly_connected(
    nodes: Sequence[tuple[str, str]], edges: Mapping[tuple[str, str], list[tuple[str, str] | None]]
) -> list[list[tuple[str, str]]]:
    """Tarjan's algorithm, iterative."""
    index: dict[tuple[str, str], int] = {}
    low: dict[tuple[str, str], int] = {}
    on_stack: set[tuple[str, str]] = set()
    stack: list[tuple[str, str]] = []
    result: list[list[tuple[str, str]]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[tuple[str, str], int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            successors = [e for e in edges.get(node, []) if e is not None and e in edges]
            if child > 0:
                low[node] = min(low[node], low[successors[child - 1]])
            pushed = False
            for i in range(child, len(successors)):
                target = successors[i]
                if target not in index:
                    work.append((node, i + 1))
                    work.append((target, 0))
                    pushed = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if pushed:
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(component)
    return result


def sorted_unique(issues: Sequence[DialplanIssue], paths: Sequence[str]) -> list[DialplanIssue]:
    order = {path: i for i, path in enumerate(paths)}
    unique = list(dict.fromkeys(issues))
    return sorted(
        unique, key=lambda i: (order.get(i.mark.path, len(order)), i.mark.line, i.mark.column)
    )
