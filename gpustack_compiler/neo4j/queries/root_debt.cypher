// Root debt: every root input (a variable no relation defines) with the number of distinct
// variables strictly downstream of it, heaviest first. $system: null for all, else one system.
MATCH (r:Root)
WHERE $system IS NULL OR r.system = $system
OPTIONAL MATCH (r)-[:FEEDS|DEFINES*]->(x:Variable)
WITH r, count(DISTINCT x) AS weight
RETURN r.name AS name, r.family AS family, r.category AS category, weight
ORDER BY weight DESC, name
