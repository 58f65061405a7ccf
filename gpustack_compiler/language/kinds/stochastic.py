"""stochastic: a variable drawn from a distribution (`distributions.py`) whose parameters are expressions.
A deterministic resolution takes the distribution's mean; Monte Carlo draws it."""

from __future__ import annotations

from .base import RelationKind
from .distributions import DISTRIBUTIONS, RandomValue
from .evaluation import Outcome, num, resolved_inputs

PREFIX = "parameters."


class Stochastic(RelationKind):
    name = "stochastic"

    def parts(self, spec):
        return {PREFIX + key: (text, False) for key, text in spec.parameters.items()}

    def problems(self, spec, known):
        expected = DISTRIBUTIONS[spec.distribution].parameters
        if set(spec.parameters) == set(expected):
            return []
        return [("schema.invalid", f"{spec.name}: a {spec.distribution} distribution takes parameters "
                                   f"{', '.join(expected)}")]

    def dimensions(self, spec, target, dim_of, none):
        powers = DISTRIBUTIONS[spec.distribution].parameters
        return {PREFIX + key: target ** p if p else none for key, p in powers.items()}

    def canonical(self, spec, part, symbol):
        family = DISTRIBUTIONS[spec.distribution]
        return family.mean({key: part(PREFIX + key) for key in family.parameters})

    def record(self, spec, inputs):
        return {"distribution": spec.distribution, "parameters": dict(sorted(spec.parameters.items())),
                "parameter_dimensions": dict(DISTRIBUTIONS[spec.distribution].parameters)}

    def evaluate(self, rel, ctx):
        inputs, subs = resolved_inputs(rel, ctx)
        family = DISTRIBUTIONS[rel["distribution"]]
        parameters = {key: num(ctx.expr(rel, PREFIX + key).xreplace(subs)) for key in family.parameters}
        drawn = ctx.random(rel["defines"], RandomValue(rel["name"], family, parameters))
        if drawn is not None:
            return Outcome(drawn, inputs, f"drawn from its {family.name} distribution")
        return Outcome(family.mean(parameters), inputs, f"mean of its {family.name} distribution")
