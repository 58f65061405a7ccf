"""Typed results of an experiment run, and the artifact they make (JSON Schema in
schemas/experiment_artifact.schema.json, generated from these models).

An artifact is content-addressed twice: its `run_id` is the hash of what was asked (protocol hash,
code version, catalog hash, seed, parameters), its `artifact_sha256` the hash of what came out (the
canonical JSON of every other field). Nothing in it depends on the clock, the machine or the working
directory, so the same inputs give the same bytes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

ARTIFACT_FORMAT = 1
# What a number is (GLOSSARY: evidence class): measured by an instrument, modeled by the engine, assumed as a
# scenario boundary, prior from literature, inadmissible (a measurement that failed its check, never scored),
# unmeasured (named, no value).
EvidenceClass = Literal["measured", "modeled", "assumed", "prior", "inadmissible", "unmeasured"]
Conclusion = Literal["failed_virtual_screen", "inconclusive", "survived_virtual", "failed_real_validation",
                     "survived_real_validation"]


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


class MissingCapability(_Result):
    name: str = Field(description="Short name of what the system cannot do yet.")
    description: str
    needed_by: list[str] = Field(description="Metrics that need it.")


class MetricResult(_Result):
    name: str
    unit: str
    primary: bool
    estimator: Literal["mean", "proportion"]
    status: Literal["resolved", "unresolved", "deferred"] = Field(
        description="deferred: the metric is first measurable at a later stage.")
    point: float | None = None
    lower: float | None = Field(None, description="Lower bound of the two-sided interval (one-sided at (1+level)/2).")
    upper: float | None = None
    interval_level: float
    samples: int = Field(0, description="Replications (mean) or trials (proportion) the value rests on.")
    successes: int | None = None
    sd: float | None = None
    missing_capabilities: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    evidence_class: EvidenceClass | None = Field(None, description=(
        "What the value is: measured, modeled, assumed, prior, inadmissible or unmeasured (absent in artifacts "
        "written before classes were recorded)."))

    @model_serializer(mode="wrap")
    def _without_unrecorded_class(self, handler):
        # Artifacts written before evidence classes keep their bytes, and so their hashes.
        data = handler(self)
        if data.get("evidence_class") is None:
            data.pop("evidence_class", None)
        return data

    @property
    def evidence(self) -> str:
        """The evidence class as shown: an artifact written before classes were recorded says so."""
        return self.evidence_class or "not recorded"


class FalsifierResult(_Result):
    id: str
    metric: str
    op: Literal["lt", "le", "gt", "ge", "between"]
    bound: Literal["lower", "point", "upper"]
    threshold: float = Field(description="In the metric's unit.")
    upper: float | None = None
    threshold_as_written: str
    compared_value: float | None = None
    status: Literal["passed", "failed", "unresolved", "deferred"]
    reason: str


class EvidenceResult(_Result):
    id: str
    kind: str
    mandatory: bool
    earliest_stage: Literal["virtual", "real"]
    acceptance: str
    metrics: list[str]
    status: Literal["satisfied", "failed", "missing", "deferred"]
    reason: str


class EvidenceGap(_Result):
    source: str = Field(description="requirement:<id> or metric:<name>.")
    stage: Literal["virtual", "real"] = Field(description="Stage at which the gap must be closed.")
    reason: str


class DataId(_Result):
    id: str = Field(description=("Content identity: `sha256:<hex>` of the data, or `observation:<id>` of an "
                                 "observation in data/observations (immutable, held to its lock)."))
    name: str = Field(description="What the data is.")


class ArmResult(_Result):
    id: str
    role: Literal["baseline", "candidate"]
    replications_run: int


class CommonRandomNumbers(_Result):
    used: bool
    verified: bool | None = Field(description="Every arm of each replication saw the same failure trace "
                                  "(None: nothing was replayed).")
    description: str


class ProtocolRef(_Result):
    id: str
    version: int
    title: str
    sha256: str
    snapshot: dict = Field(description="The frozen protocol's canonical data.")


class Artifact(_Result):
    artifact_format: int = ARTIFACT_FORMAT
    run_id: str
    protocol: ProtocolRef
    stage: Literal["virtual", "real"]
    code_version: str
    catalog_hash: str
    seed: int
    parameters: dict = Field(description="Everything besides the seed that the run_id hashes: replications, "
                             "stage, scenario file hashes, observation file hashes.")
    arms: list[ArmResult]
    common_random_numbers: CommonRandomNumbers
    metrics: list[MetricResult]
    falsifiers: list[FalsifierResult]
    evidence: list[EvidenceResult]
    conclusion: Conclusion
    conclusion_reasons: list[str]
    missing_capabilities: list[MissingCapability]
    evidence_gaps: list[EvidenceGap]
    assumptions: list[str]
    calibration_ids: list[DataId]
    evaluation_ids: list[DataId]
    artifact_sha256: str = Field(description="SHA-256 of the canonical JSON of every other field.")


class RunResult(_Result):
    """What `run_protocol` returns: the artifact and where it was written (relative to the experiments
    folder's parent)."""

    artifact: Artifact
    path: str
    reused: bool = Field(description="An identical artifact was already there.")


def _register_schema() -> None:
    from gpustack_compiler.build.schema import SCHEMA_FILES

    SCHEMA_FILES.setdefault("experiment_artifact.schema.json", Artifact)


_register_schema()
