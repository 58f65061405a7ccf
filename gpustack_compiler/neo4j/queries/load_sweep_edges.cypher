// Relationships this compile did not write, between nodes that survive: an input dropped from a
// relation, a citation removed, or an edge drawn by hand in Browser (the compile replaces the graph).
MATCH ()-[e]->() WHERE e.gpustack_load IS NULL OR e.gpustack_load <> $load
DELETE e
RETURN count(*) AS removed
