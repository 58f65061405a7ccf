// The outgoing relationships of the nodes a load rewrites (by element id), with their digests (null for
// one drawn by hand, which the load then deletes or takes over) and property counts.
UNWIND $ids AS id
MATCH (a)-[e]->(b) WHERE elementId(a) = id
RETURN elementId(e) AS id, type(e) AS type, elementId(a) AS a, elementId(b) AS b, e.gpustack_load AS digest,
       size(keys(e)) AS keys
