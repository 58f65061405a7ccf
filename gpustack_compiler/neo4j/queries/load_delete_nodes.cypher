// Nodes this compile does not write (renamed or removed entries, the previous Build), by element id.
UNWIND $ids AS id
MATCH (n) WHERE elementId(n) = id
DETACH DELETE n
RETURN count(*) AS written
