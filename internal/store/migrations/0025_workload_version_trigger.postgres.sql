-- Every UPDATE of a workloads row adds one to its version, whoever makes it:
-- this release, an older one beside it in a rolling upgrade, a hand-run fix.
CREATE FUNCTION gantry_workload_version() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.version := OLD.version + 1; RETURN NEW; END $$;
CREATE TRIGGER workloads_version BEFORE UPDATE ON workloads FOR EACH ROW EXECUTE FUNCTION gantry_workload_version();
