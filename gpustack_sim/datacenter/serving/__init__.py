"""Serving replay: an inference fleet in the virtual datacenter (workload families, continuous batching per
replica, routing, migration, autoscaling, power and grid dispatches), priced by the catalog's serving
relations through catalog/bindings/serve_replay.yaml."""

from .api import simulate_serving
from .control import Controller, FleetObservation, GridEvent
from .from_engine import replica_parameters
from .parameters import ReplicaParameters
from .results import ServingResult
from .workloads import family_names, load_family

__all__ = ["Controller", "FleetObservation", "GridEvent", "ReplicaParameters", "ServingResult", "family_names",
           "load_family", "replica_parameters", "simulate_serving"]
