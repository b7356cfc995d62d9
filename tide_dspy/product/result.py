"""What one `tide discover` run produced: the findings, their checks, and how the run went."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tide_dspy.domains import get_setting
from tide_dspy.product.patches import PatchCheck
from tide_dspy.product.verify import NOT_RUN, STATUS_RANK, VERIFIED, PatchVerification
from tide_dspy.scan import ScanRecord
from tide_dspy.schemas import Artifact, Finding, Instance, RoundRecord, Template


@dataclass
class WindowRound:
    window: int  # 1-based
    record: RoundRecord


@dataclass
class DiscoverResult:
    setting: str
    target: str
    instance: Instance
    findings: list[Finding]
    program_source: str
    templates: list[Template] = field(default_factory=list)
    patch_checks: list[PatchCheck | None] = field(default_factory=list)  # aligned with findings
    verifications: list[PatchVerification | None] = field(default_factory=list)  # aligned with findings; --verify only
    verify: dict[str, Any] = field(default_factory=dict)  # command, baseline, links left out of the copy
    rounds: list[WindowRound] = field(default_factory=list)
    scans: list[ScanRecord] = field(default_factory=list)  # one per window of a scanning program
    windows: int = 1
    sources: dict[str, str] = field(default_factory=dict)  # workspace item id -> file
    notes: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # unreadable inputs: {path, reason}
    backbone: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def artifact(self, artifact_id: str) -> Artifact | None:
        return next((a for a in self.instance.artifacts if a.id == artifact_id), None)

    def template_name(self, template_id: str) -> str | None:
        return next((t.name for t in self.templates if t.id == template_id), None)

    def failed_rounds(self) -> list[WindowRound]:
        return [r for r in self.rounds if r.record.failed]

    def every_round_failed(self) -> bool:
        """True when rounds ran and none of them produced usable output: "no findings" then means nothing."""
        return bool(self.rounds) and len(self.failed_rounds()) == len(self.rounds)

    def first_error(self) -> str | None:
        failed = self.failed_rounds()
        return (failed[0].record.error or "no parseable output") if failed else None

    def order_by_verification(self) -> None:
        """Fixes first (most fixed, fewest broken), then no change, not run, breaks tests, timed out."""
        def key(i: int):
            v = self.verifications[i]
            return (STATUS_RANK[v.status], -len(v.fixed), len(v.broken)) if v is not None else (len(STATUS_RANK), 0, 0)

        order = sorted(range(len(self.findings)), key=key)
        self.findings = [self.findings[i] for i in order]
        self.patch_checks = [self.patch_checks[i] for i in order]
        self.verifications = [self.verifications[i] for i in order]

    def summary(self) -> dict[str, Any]:
        records = [r.record for r in self.rounds]
        calls = [*records, *self.scans]  # the scan's calls count with the rounds'
        ins = [r.input_tokens for r in calls if r.input_tokens is not None]
        outs = [r.output_tokens for r in calls if r.output_tokens is not None]
        return {
            "findings": len(self.findings),
            "patches_apply": sum(1 for c in self.patch_checks if c is not None and c.applies),
            "patches_checked": sum(1 for c in self.patch_checks if c is not None and c.status != "no patch"),
            **({"patches_verified_fix": sum(1 for v in self.verifications if v is not None and v.status == VERIFIED),
                "patches_run": sum(1 for v in self.verifications if v is not None and v.status != NOT_RUN)}
               if self.verify else {}),
            "windows": self.windows,
            "rounds": len(records),
            "lm_calls": sum(r.lm_calls for r in calls),
            **({"scan_lm_calls": sum(s.lm_calls for s in self.scans)} if self.scans else {}),
            "input_tokens": sum(ins) if ins else None,
            "output_tokens": sum(outs) if outs else None,
            "failed_rounds": sum(1 for r in records if r.failed),
            "artifacts": len(self.instance.artifacts),
            "skipped_inputs": len(self.skipped),
            "seconds": round(self.seconds, 1),
        }

    def summary_line(self) -> str:
        s = self.summary()
        tokens = "n/a" if s["input_tokens"] is None else f"{s['input_tokens']} in / {s['output_tokens'] or 0} out"
        patches = (
            f", {s['patches_apply']}/{s['patches_checked']} patches apply"
            if get_setting(self.setting).checks_patches
            else ""
        )
        if self.verify:
            patches += f", {s['patches_verified_fix']}/{s['patches_run']} tested patches fix a test"
        failed = f" ({s['failed_rounds']} FAILED)" if s["failed_rounds"] else ""
        scan = f" ({s['scan_lm_calls']} of them the scan)" if self.scans else ""
        return (
            f"{s['findings']} finding{'' if s['findings'] == 1 else 's'}{patches} | {s['rounds']} rounds{failed} over "
            f"{s['windows']} window(s) | {s['lm_calls']} LM calls{scan} | tokens {tokens} | {s['seconds']} s"
        )
