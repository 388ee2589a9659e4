-- What a new leader needs to carry on where a killed one stopped.
-- warned: the idle culler's warnings on a running workload (JSON of
-- workload.Warned, '' when none), so that a new leader neither warns again
-- nor stops a workload sooner than its warning said.
ALTER TABLE workloads ADD COLUMN warned TEXT NOT NULL DEFAULT '';
-- warm_charged: how far each node group's placeholders have been charged
-- (micros), so that a pass cut off between charging and resetting them is
-- not charged twice.
CREATE TABLE warm_charged (
    node_group TEXT PRIMARY KEY,
    until BIGINT NOT NULL
);
