"""A DummyLM whose answer is computed from the prompt, for end-to-end tests without a model.

It answers the round signatures with the instance's gold problems (at most `max_new`, skipping those already
found), the distillation signatures with a template built from the problem text, and COPRO's instruction
proposals (COPRO, MIPROv2, SIMBA, GEPA) with a fixed new instruction.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.utils.dummies import DummyLM

from tide_dspy.schemas import Instance

# The hand-written test instances, laid out like the data folder (workspace/, repository/).
FIXTURE_DATA = Path(__file__).resolve().parent / "fixtures" / "instances"


def field_block(message: str, field: str) -> str:
    match = re.search(rf"\[\[ ## {field} ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", message, re.S)
    return match.group(1) if match else ""


def gold_drafts(instance: Instance) -> list[dict]:
    drafts = []
    for p in instance.problems:
        d = {"description": p.description[:200], "evidence_ids": list(p.evidence), "why": "", "used_template_id": ""}
        if instance.setting == "workspace":
            d.update(action_id=p.action.action_id, parameters={k: str(v) for k, v in p.action.parameters.items()})
        else:
            d["patch"] = p.patch or ""
        drafts.append(d)
    return drafts


class _Engine(DummyEngine):
    def _complete_messages(self, messages):
        from dspy.lm15 import Message, Response, TextPart, Usage

        owner = self.owner
        owner.calls += 1
        answer = owner.route(messages[-1]["content"], messages[0]["content"])
        text = answer if isinstance(answer, str) else owner._format_answer_fields(answer)
        return Response(id=None, model="dummy", message=Message.assistant([TextPart(text)]),
                        finish_reason="stop", usage=Usage(input_tokens=10, output_tokens=5, total_tokens=15))


class RoutedLM(DummyLM):
    def __init__(self, instances: list[Instance], instruction: str = "Find every hidden problem.", gated: bool = False):
        super().__init__({})
        self.instances = list(instances)
        self.instruction = instruction
        # gated: findings cite wrong evidence unless the prompt carries `instruction`, so an optimizer that
        # installs the proposed instruction measurably improves the metric.
        self.gated = gated
        self.calls = 0
        self._engine_spec = _Engine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def copy(self, **kwargs):
        new = super().copy(**kwargs)
        new.instances, new.gated, new.instruction, new.calls = self.instances, self.gated, self.instruction, 0
        new._engine_spec = _Engine(new)
        new._async_engine_spec = AsyncDummyEngine(new._engine_spec)
        return new

    def route(self, message: str, system: str = "") -> dict | str:
        if "new instruction" in message and "``` blocks" in message:  # GEPA's reflection prompt, free text
            return f"```\n{self.instruction}\n```"
        if "[[ ## findings ## ]]" in message.split("Respond with")[-1]:
            return {"findings": self.findings_for(message, wrong=self.gated and self.instruction not in system)}
        if "[[ ## template ## ]]" in message.split("Respond with")[-1]:
            # Abstract but distinct per problem: its plain lower-case words, in reverse order (so no name, id,
            # number or copied passage of the case survives).
            words = [w for w in re.findall(r"[A-Za-z]+", field_block(message, "problem")) if w.islower()][::-1]
            return {"template": {"name": "when " + " ".join(words[:6]), "pattern": " ".join(words[:25]),
                                 "evidence_flow": ["look for the first signal", "join it with the second"]}}
        # Optimizers' proposal signatures: answer every requested text field with the new instruction.
        tail = message.split("Respond with")[-1]
        if tail.startswith(" a JSON object"):  # JSONAdapter, DSPy's fallback after a ChatAdapter failure
            return json.dumps({f: self.instruction for f in re.findall(r"`(\w+)`", tail)})
        requested = re.findall(r"\[\[ ## (\w+) ## \]\]", tail)
        return {f: self.instruction for f in requested if f != "completed"}

    def findings_for(self, message: str, wrong: bool = False) -> list[dict]:
        context = field_block(message, "context")
        # The instance whose artifacts are all shown; repository instances of one project share ids, so the
        # largest such instance is the one rendered.
        shown = [i for i in self.instances if all(a.id in context for a in i.artifacts)]
        instance = max(shown, key=lambda i: len(i.artifacts), default=None)
        if instance is None:
            return []
        max_new = int(field_block(message, "max_new") or 1)
        found = field_block(message, "already_found")
        drafts = [d for d in gold_drafts(instance) if d["description"] not in found][:max_new]
        if wrong:
            spare = [a.id for a in instance.artifacts if not any(a.id in p.evidence for p in instance.problems)]
            for d in drafts:
                d["evidence_ids"] = spare[:1]
        return drafts


def fixture_instances(setting: str, split: str | None = None) -> list[Instance]:
    """The hand-written test instances of a setting (tests/fixtures/instances; see its README)."""
    from tide_dspy.data import load_instances

    return load_instances(FIXTURE_DATA / setting, setting=setting, split=split)
