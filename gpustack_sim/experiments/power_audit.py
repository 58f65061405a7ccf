"""The power audit: for every falsifier, the smallest sample at which it can pass at all, against the
protocol's planned sample. A gate that cannot pass at the planned size is flagged before anything runs:
a run at that size could only fail it, which would say nothing about the mechanism.

- proportion metrics: exact Clopper–Pearson, with the most favourable outcome (every trial a success, or
  none); e.g. a 95% one-sided lower bound (90% interval) >= 0.99 needs 299 trials without a miss.
- mean metrics: a bound needs at least 2 replications (Student's t); beyond that, whether it passes depends
  on the spread, which only the run can show; a point comparison can pass at 1.
- evidence requirements with `min_samples`: met only if the planned sample reaches it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .protocol import Protocol
from .stats import min_trials_proportion


class GateAudit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: str
    gate: str
    kind: str  # falsifier | evidence
    metric: str
    estimator: str
    bound: str
    rule: str
    planned: int
    planned_from: str
    min_samples: int | None
    can_pass: bool
    note: str

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


class Audit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gates: list[GateAudit]

    @property
    def flagged(self) -> list[GateAudit]:
        return [g for g in self.gates if not g.can_pass]

    def to_dict(self) -> dict:
        return {"gates": [g.to_dict() for g in self.gates], "flagged": len(self.flagged)}


def audit_protocol(protocol: Protocol) -> list[GateAudit]:
    spec = protocol.spec
    out = []
    for f in spec.falsifiers:
        m = protocol.metric(f.metric)
        t = protocol.thresholds[f.id]
        level = (1 + m.interval) / 2
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}.get(f.op)
        unit = "" if m.unit == "1" else f" {m.unit}"
        rule = (f"{f.bound} in [{t.value:g}, {t.upper:g}]{unit}" if f.op == "between"
                else f"{f.bound} {sym} {t.value:g}{unit}")
        if m.estimator == "proportion":
            planned, source = (m.planned_trials, "planned_trials") if m.planned_trials else (
                spec.planned_sample_size, "planned_sample_size")
            need = min_trials_proportion(f.op, f.bound, t.value, t.upper, m.interval)
            note = ("never passes: no number of trials brings the bound there" if need is None else
                    f"exact Clopper-Pearson, {level:.3g} one-sided bound" if f.bound != "point" else
                    "point estimate: the smallest count that can land there")
        else:
            planned, source = spec.planned_sample_size, "planned_sample_size"
            need = 2 if f.bound != "point" else 1
            note = ("Student's t bound: at least 2 replications; passing also needs the spread small enough"
                    if f.bound != "point" else "point estimate")
        can = need is not None and need <= planned
        if not can and need is not None:
            note += f"; cannot pass at the planned {planned}: needs {need}"
        out.append(GateAudit(protocol=protocol.key, gate=f.id, kind="falsifier", metric=m.name, estimator=m.estimator,
                             bound=f.bound, rule=rule, planned=planned, planned_from=source, min_samples=need,
                             can_pass=can, note=note))
    for e in spec.evidence_requirements:
        if e.min_samples is None:
            continue
        for name in e.metrics:
            m = protocol.metric(name)
            planned, source = (m.planned_trials, "planned_trials") if m.planned_trials else (
                spec.planned_sample_size, "planned_sample_size")
            can = e.min_samples <= planned
            note = "evidence requirement: samples the metric must rest on"
            if not can:
                note += f"; cannot be met at the planned {planned}: needs {e.min_samples}"
            out.append(GateAudit(protocol=protocol.key, gate=e.id, kind="evidence", metric=name,
                                 estimator=m.estimator, bound="-", rule=f"samples >= {e.min_samples}",
                                 planned=planned, planned_from=source, min_samples=e.min_samples, can_pass=can,
                                 note=note))
    return out


def audit(protocols: list[Protocol]) -> Audit:
    return Audit(gates=[g for p in protocols for g in audit_protocol(p)])
