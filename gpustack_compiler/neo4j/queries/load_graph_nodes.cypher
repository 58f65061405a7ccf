// Before writing: the nodes earlier compiles wrote, with the digest of what each one held when written
// (its labels, properties and outgoing relationships) and what an edit by hand in Browser would change
// without updating the digest: the labels, the number of properties, the number of outgoing relationships.
MATCH (n) WHERE n.gpustack_load IS NOT NULL
RETURN elementId(n) AS id, labels(n) AS labels, n.name AS name, n.gpustack_load AS digest, size(keys(n)) AS keys,
       COUNT { (n)-->() } AS degree
