-- GPU telemetry pushed by node agents. A series is one device (a GPU or a
-- MIG instance) as held by one container, with the workload Gantry
-- attributed it to ('' when none); samples and rollups refer to it by id.
-- Metric columns follow telemetry.Metric's storage order; NULL means not
-- measured (never zero). Times are Unix milliseconds.
CREATE TABLE gpu_series (
    id            BIGINT PRIMARY KEY,
    node          TEXT   NOT NULL,
    device        TEXT   NOT NULL, -- MIG UUID, or the GPU's UUID
    gpu           TEXT   NOT NULL, -- the physical GPU's UUID
    gpu_index     INTEGER NOT NULL,
    model         TEXT   NOT NULL,
    mig_profile   TEXT   NOT NULL,
    mig_instance  INTEGER NOT NULL, -- -1 for a whole GPU
    namespace     TEXT   NOT NULL,
    pod           TEXT   NOT NULL,
    container     TEXT   NOT NULL,
    workload      TEXT   NOT NULL,
    attribution   TEXT   NOT NULL
);
CREATE UNIQUE INDEX gpu_series_key ON gpu_series (node, device, namespace, pod, container, workload);
CREATE INDEX gpu_series_workload ON gpu_series (workload);
-- Raw samples, kept for telemetry.rawRetention.
CREATE TABLE gpu_samples (
    series_id      BIGINT NOT NULL,
    t              BIGINT NOT NULL,
    share          DOUBLE PRECISION NOT NULL,
    gpu_util       DOUBLE PRECISION,
    mem_copy_util  DOUBLE PRECISION,
    sm_active      DOUBLE PRECISION,
    sm_occupancy   DOUBLE PRECISION,
    tensor_active  DOUBLE PRECISION,
    dram_active    DOUBLE PRECISION,
    fb_used        DOUBLE PRECISION,
    fb_total       DOUBLE PRECISION,
    pcie_tx        DOUBLE PRECISION,
    pcie_rx        DOUBLE PRECISION,
    nvlink_tx      DOUBLE PRECISION,
    nvlink_rx      DOUBLE PRECISION,
    power          DOUBLE PRECISION,
    temperature    DOUBLE PRECISION,
    sm_clock       DOUBLE PRECISION,
    PRIMARY KEY (series_id, t)
);
CREATE INDEX gpu_samples_t ON gpu_samples (t);
-- Rollups per series: res 60 (one minute) or 3600 (one hour) seconds, bucket
-- the start of the period; kept for telemetry.rollupRetention.
CREATE TABLE gpu_rollups (
    res       INTEGER NOT NULL,
    series_id BIGINT  NOT NULL,
    bucket    BIGINT  NOT NULL,
    n         INTEGER NOT NULL,
    gpu_util_avg DOUBLE PRECISION, gpu_util_max DOUBLE PRECISION, gpu_util_p95 DOUBLE PRECISION,
    mem_copy_util_avg DOUBLE PRECISION, mem_copy_util_max DOUBLE PRECISION, mem_copy_util_p95 DOUBLE PRECISION,
    sm_active_avg DOUBLE PRECISION, sm_active_max DOUBLE PRECISION, sm_active_p95 DOUBLE PRECISION,
    sm_occupancy_avg DOUBLE PRECISION, sm_occupancy_max DOUBLE PRECISION, sm_occupancy_p95 DOUBLE PRECISION,
    tensor_active_avg DOUBLE PRECISION, tensor_active_max DOUBLE PRECISION, tensor_active_p95 DOUBLE PRECISION,
    dram_active_avg DOUBLE PRECISION, dram_active_max DOUBLE PRECISION, dram_active_p95 DOUBLE PRECISION,
    fb_used_avg DOUBLE PRECISION, fb_used_max DOUBLE PRECISION, fb_used_p95 DOUBLE PRECISION,
    fb_total_avg DOUBLE PRECISION, fb_total_max DOUBLE PRECISION, fb_total_p95 DOUBLE PRECISION,
    pcie_tx_avg DOUBLE PRECISION, pcie_tx_max DOUBLE PRECISION, pcie_tx_p95 DOUBLE PRECISION,
    pcie_rx_avg DOUBLE PRECISION, pcie_rx_max DOUBLE PRECISION, pcie_rx_p95 DOUBLE PRECISION,
    nvlink_tx_avg DOUBLE PRECISION, nvlink_tx_max DOUBLE PRECISION, nvlink_tx_p95 DOUBLE PRECISION,
    nvlink_rx_avg DOUBLE PRECISION, nvlink_rx_max DOUBLE PRECISION, nvlink_rx_p95 DOUBLE PRECISION,
    power_avg DOUBLE PRECISION, power_max DOUBLE PRECISION, power_p95 DOUBLE PRECISION,
    temperature_avg DOUBLE PRECISION, temperature_max DOUBLE PRECISION, temperature_p95 DOUBLE PRECISION,
    sm_clock_avg DOUBLE PRECISION, sm_clock_max DOUBLE PRECISION, sm_clock_p95 DOUBLE PRECISION,
    PRIMARY KEY (res, series_id, bucket)
);
CREATE INDEX gpu_rollups_bucket ON gpu_rollups (res, bucket);
-- Periods that received samples and whose rollups are (re)computed once
-- they have closed: late samples (an agent's buffer) mark old periods again.
-- marked counts the marks, so a rollup computed while samples arrived does
-- not clear the mark they made.
CREATE TABLE gpu_rollup_pending (
    res    INTEGER NOT NULL,
    bucket BIGINT  NOT NULL,
    marked BIGINT  NOT NULL,
    PRIMARY KEY (res, bucket)
);
-- Each node's GPUs as their agent last reported them, and their health.
CREATE TABLE gpu_devices (
    node        TEXT    NOT NULL,
    gpu         TEXT    NOT NULL, -- UUID
    state       TEXT    NOT NULL, -- JSON telemetry.GPUState
    agent       TEXT    NOT NULL, -- the agent's version
    seen_at     BIGINT  NOT NULL,
    healthy     BOOLEAN NOT NULL,
    reason      TEXT    NOT NULL,
    since       BIGINT  NOT NULL, -- when the health last changed
    xid         BIGINT  NOT NULL, -- the last critical XID (0: none)
    xid_at      BIGINT  NOT NULL,
    PRIMARY KEY (node, gpu)
)
