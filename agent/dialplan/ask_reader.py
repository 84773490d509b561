"""Reading ``ask`` steps: the prompt, the intents and slot an answer may fill, the reprompts.

An ask in the scope of an ``escalation`` step gets a way to ask for a person
(:func:`~agent.dialplan.escalation.with_escalation`).

Beyond the schema, an ask's keys must not clash: two intents on one DTMF key, an intent on a key
the slot collects, slot limits that do not fit the slot's type, synonyms no example uses.
"""

from __future__ import annotations


from yaml.nodes import Node, ScalarNode

from agent.dialplan.checks import Reference
from agent.dialplan.escalation import with_escalation
from agent.dialplan.model import (
    DEFAULT_REPROMPT_COUNT,
    AskStep,
    Intent,
    RepromptPolicy,
    Settings,
    Slot,
)
from agent.dialplan.templates import Template
from agent.dialplan.node_reader import NodeReader, is_null
from agent.yamlmarks import Mark

__all__ = ["AskReader"]


class AskReader(NodeReader):
    """Reads ``ask`` steps."""

    def _ask_step(
        self, step_id: str, node: Node, settings: Settings, mark: Mark, next_step: str | None
    ) -> AskStep | None:
        entries = self.mapping(node)
        if entries is None:
            return None
        prompt = self.optional(entries, "prompt", lambda n: self.template(n, "'prompt'"))
        ok = "prompt" not in entries or prompt is not None
        slot: Slot | None = None
        if "slot" in entries:
            slot = self._slot(entries["slot"][1])
            ok = ok and slot is not None
        speech, dtmf = True, True
        if "input" in entries:
            modes = self._input_modes(entries["input"][1])
            if modes is None:
                ok = False
            else:
                speech, dtmf = "speech" in modes, "dtmf" in modes
        skip_if_set = False
        if "skip_if_set" in entries:
            value = self.boolean(entries["skip_if_set"][1])
            ok = ok and value is not None
            skip_if_set = bool(value)
            if skip_if_set and slot is None:
                self.error(entries["skip_if_set"][0], "'skip_if_set' needs a 'slot' in the ask")
                ok = False
        intents: list[Intent] = []
        if "intents" in entries:
            intents_node = entries["intents"][1]
            intent_entries = self.mapping(intents_node)
            if intent_entries is None:
                ok = False
            else:
                dtmf_seen: dict[str, str] = {}
                reserved = self._reserved_keys(slot)
                for name, (key_node, intent_node) in intent_entries.items():
                    intent = self._intent(name, key_node, intent_node)
                    if intent is None:
                        ok = False
                        continue
                    if intent.dtmf is not None:
                        where = intent_entries[name][1]
                        if intent.dtmf in dtmf_seen:
                            self.error(
                                where,
                                f"intent {name!r} uses DTMF {intent.dtmf!r}, already used by "
                                f"intent {dtmf_seen[intent.dtmf]!r}",
                            )
                            ok = False
                        elif intent.dtmf in reserved:
                            self.error(where, f"intent {name!r} uses DTMF {intent.dtmf!r}, "
                                              + reserved[intent.dtmf])
                            ok = False
                        dtmf_seen[intent.dtmf] = name
                    intents.append(intent)
        default_reprompts = (prompt,) * DEFAULT_REPROMPT_COUNT if prompt is not None else ()
        no_input = RepromptPolicy(default_reprompts, None)
        no_match = RepromptPolicy(default_reprompts, None)
        if "no_input" in entries:
            policy = self._policy(entries["no_input"][1], "no_input", settings)
            ok = ok and policy is not None
            no_input = policy or no_input
        if "no_match" in entries:
            policy = self._policy(entries["no_match"][1], "no_match", settings)
            ok = ok and policy is not None
            no_match = policy or no_match
        if not ok:
            return None
        ask_intents = tuple(intents)
        if settings.escalation is not None:
            target = settings.escalation
            self.result.references.append(Reference(
                self._flow_name, target, "escalation", self.escalation_marks.get(target, mark)))
            ask_intents = with_escalation(ask_intents, target, self._reserved_keys(slot), mark)
            self.result.intents.update(i.name for i in ask_intents)
        return AskStep(
            step_id, prompt, ask_intents, no_input, no_match, settings, mark, next_step,
            slot, speech, dtmf, skip_if_set,
        )

    @staticmethod
    def _reserved_keys(slot: Slot | None) -> dict[str, str]:
        if slot is None:
            return {}
        if slot.type == "yes_no":
            why = f"which answers the yes/no slot {slot.name!r} (1 is yes, 2 is no)"
            return {"1": why, "2": why}
        if slot.collects_digits:
            why = (
                f"but this ask collects keypad digits for slot {slot.name!r}; "
                "bind intents to '*' or '#' instead"
            )
            reserved = {d: why for d in "0123456789"}
            if slot.terminator:
                reserved[slot.terminator] = f"which ends the digits of slot {slot.name!r}"
            return reserved
        return {}

    def _input_modes(self, node: Node) -> set[str] | None:
        if isinstance(node, ScalarNode):
            value = self.choice(node)
            return {value} if value is not None else None
        items = self.sequence(node)
        if items is None:
            return None
        modes: set[str] = set()
        for item in items:
            value = self.choice(item)
            if value is None:
                return None
            modes.add(value)
        return modes

    def _slot(self, node: Node) -> Slot | None:
        entries = self.mapping(node)
        if entries is None or "name" not in entries or "type" not in entries:
            return None
        name = self.variable_name(entries["name"][1], "the slot's 'name'", assigning=True)
        kind = self.choice(entries["type"][1])
        limits: dict[str, int | None] = {}
        for key in ("min_length", "max_length"):
            limits[key] = self.optional(entries, key, self.integer)
        for key in ("min", "max"):
            limits[key] = self.optional(entries, key, self.integer)
        terminator: str | None = "#"
        if "terminator" in entries:
            value_node = entries["terminator"][1]
            if is_null(value_node):
                terminator = None
            else:
                terminator = self.string(value_node)
                if terminator is None:
                    return None
        if name is None or kind is None:
            return None
        if any(k in entries and limits[k] is None for k in limits):
            return None
        if kind not in ("digits", "text") and (
            limits["min_length"] is not None or limits["max_length"] is not None
        ):
            key = "min_length" if "min_length" in entries else "max_length"
            self.error(entries[key][0], f"'{key}' applies to digits and text slots, not {kind}")
            return None
        if kind != "number" and (limits["min"] is not None or limits["max"] is not None):
            key = "min" if "min" in entries else "max"
            self.error(entries[key][0], f"'{key}' applies to number slots, not {kind}")
            return None
        low, high = limits["min_length"], limits["max_length"]
        if low is not None and high is not None and low > high:
            self.error(entries["min_length"][1], f"'min_length' {low} is more than 'max_length' {high}")
            return None
        self.result.variables.add(name)
        return Slot(name, kind, low, high, limits["min"], limits["max"], terminator)

    def _intent(self, name: str, key_node: Node, node: Node) -> Intent | None:
        self.result.intents.add(name)
        what = f"intent {name!r}"
        entries = self.mapping(node)
        if entries is None:
            return None
        ok = True
        examples: list[str] = []
        if "examples" in entries:
            items = self.sequence(entries["examples"][1])
            if items is None:
                ok = False
            else:
                for item in items:
                    text = self.string(item)
                    if text is None:
                        ok = False
                    else:
                        examples.append(text)
        synonyms: list[tuple[str, tuple[str, ...]]] = []
        if "synonyms" in entries:
            synonym_entries = self.mapping(entries["synonyms"][1])
            if synonym_entries is None:
                ok = False
            for word, (word_node, alternatives_node) in (synonym_entries or {}).items():
                items = self.sequence(alternatives_node)
                alternatives = [self.string(i) for i in items or []]
                if items is None or any(a is None for a in alternatives):
                    ok = False
                    continue
                if not any(word.lower() in e.lower() for e in examples):
                    self.error(word_node, f"synonyms for {word!r}, which no example of {what} uses")
                    ok = False
                synonyms.append((word, tuple(a for a in alternatives if a)))
        dtmf: str | None = None
        if "dtmf" in entries:
            dtmf_node = entries["dtmf"][1]
            value = self.string(dtmf_node)
            if value is None:
                ok = False
            else:
                dtmf = value
        slots: list[tuple[str, str]] = []
        if "slots" in entries:
            slot_entries = self.mapping(entries["slots"][1])
            if slot_entries is None:
                ok = False
            for slot_key, type_node in (slot_entries or {}).values():
                variable = self.variable_name(slot_key, "a slot name", assigning=True)
                kind = self.choice(type_node)
                if variable is None or kind is None:
                    ok = False
                    continue
                if kind == "text":
                    self.error(type_node, "an intent cannot fill a text slot (it would take the whole sentence)")
                    ok = False
                    continue
                self.result.variables.add(variable)
                slots.append((variable, kind))
        if not examples and dtmf is None and ok:
            self.error(node, f"{what} needs 'examples' or 'dtmf' (or both)")
            ok = False
        goto = None
        if "goto" in entries:
            goto = self.ref(entries["goto"][1], "goto")
            ok = ok and goto is not None
        if not ok:
            return None
        return Intent(
            name, tuple(examples), dtmf, goto, self.mark(key_node), tuple(synonyms), tuple(slots)
        )

    def _policy(self, node: Node, key: str, settings: Settings) -> RepromptPolicy | None:
        entries = self.mapping(node)
        if entries is None:
            return None
        ok = True
        reprompts: list[Template] = []
        if "reprompts" in entries:
            items = self.sequence(entries["reprompts"][1])
            if items is None:
                ok = False
            else:
                for item in items:
                    template = self.template(item, f"a reprompt of '{key}'")
                    if template is None:
                        ok = False
                    else:
                        reprompts.append(template)
        retries = self.optional(entries, "retries", self.integer)
        if "retries" in entries and retries is None:
            ok = False
        then = None
        if "then" in entries:
            then = self.ref(entries["then"][1], "then")
            ok = ok and then is not None
        offer = None
        if "offer_person_after" in entries or "offer_prompt" in entries:
            offer = self.person_offer(node, settings.no_match)
        return RepromptPolicy(tuple(reprompts), then, retries, offer) if ok else None
