-- Every UPDATE of a workloads row adds one to its version, whoever makes it:
-- this release, an older one beside it in a rolling upgrade, a hand-run fix.
-- (A statement that sets the version itself is left as it is.)
CREATE TRIGGER workloads_version AFTER UPDATE ON workloads FOR EACH ROW WHEN NEW.version = OLD.version BEGIN UPDATE workloads SET version = OLD.version + 1 WHERE id = NEW.id; END;
