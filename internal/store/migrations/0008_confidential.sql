-- The TEE of a confidential workload (snp | tdx; '' for others): its pods run
-- on that TEE's Kata runtime class with the GPU passed through in CC mode.
ALTER TABLE workloads ADD COLUMN tee TEXT NOT NULL DEFAULT ''
