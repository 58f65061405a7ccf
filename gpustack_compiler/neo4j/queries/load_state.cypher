// Before a compile: nodes gpustack did not write (no marker; a compile refuses to touch them
// unless forced) and the build the database holds.
CALL () {
  MATCH (n) WHERE n.gpustack_load IS NULL
  RETURN count(n) AS foreign, collect(DISTINCT labels(n))[0..5] AS sample_labels
}
CALL () {
  OPTIONAL MATCH (b:Build)
  RETURN b.manifest_hash AS manifest_hash
  LIMIT 1
}
RETURN foreign, sample_labels, manifest_hash
