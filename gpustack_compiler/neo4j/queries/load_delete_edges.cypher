// Relationships this compile does not write (an input dropped from a relation, a citation removed,
// an edge drawn by hand in Browser), by element id.
UNWIND $ids AS id
MATCH ()-[e]->() WHERE elementId(e) = id
DELETE e
RETURN count(*) AS written
