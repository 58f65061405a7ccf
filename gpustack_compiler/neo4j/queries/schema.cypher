// Constraints and indexes, created before any data (each statement is idempotent).
// Uniqueness on names: MERGE and every lookup by name use these indexes.
CREATE CONSTRAINT gpustack_variable_name IF NOT EXISTS FOR (n:Variable) REQUIRE n.name IS UNIQUE;
CREATE CONSTRAINT gpustack_constant_name IF NOT EXISTS FOR (n:Constant) REQUIRE n.name IS UNIQUE;
CREATE CONSTRAINT gpustack_relation_name IF NOT EXISTS FOR (n:Relation) REQUIRE n.name IS UNIQUE;
CREATE CONSTRAINT gpustack_system_name IF NOT EXISTS FOR (n:System) REQUIRE n.name IS UNIQUE;
CREATE CONSTRAINT gpustack_reference_name IF NOT EXISTS FOR (n:Reference) REQUIRE n.name IS UNIQUE;
CREATE CONSTRAINT gpustack_preset_name IF NOT EXISTS FOR (n:Preset) REQUIRE n.name IS UNIQUE;
CREATE CONSTRAINT gpustack_table_name IF NOT EXISTS FOR (n:Table) REQUIRE n.name IS UNIQUE;
CREATE INDEX gpustack_variable_system IF NOT EXISTS FOR (n:Variable) ON (n.system);
CREATE INDEX gpustack_root_family IF NOT EXISTS FOR (n:Root) ON (n.family);
CREATE INDEX gpustack_relation_kind IF NOT EXISTS FOR (n:Relation) ON (n.kind);
CREATE INDEX gpustack_relation_system IF NOT EXISTS FOR (n:Relation) ON (n.system);
