"""A notebook's cells, as docs/python.md shows them (run by api/python_test.go
against a real server)."""

from gantry import Gantry, GantryError

g = Gantry()  # GANTRY_SERVER and GANTRY_TOKEN (or the CLI's credentials)

# What would four A100s for training cost, and would they start now?
est = g.estimate("pytorch-train", team="vision", gpu="A100-80GB", count=4)
print(f"${est['pricePerHour']:.2f}/h, starts now: {est['startsNow']} ({est.get('why', '')})")

# Launch, with the parameters the template declares.
w = g.launch("pytorch-train", team="vision", gpu="A100-80GB", count=4, parameters={"epochs": 3})
print(w.id, w.status, w.reason)

# Wait for it (here without a cluster it stays Pending: say so and go on).
try:
    w = w.wait(timeout=2)
except GantryError as e:
    print("not running yet:", e)

# What it costs so far, and the team's spend this month.
print(f"{w.name}: ${w.refresh().cost_so_far:.2f} so far")
for line in g.costs(group_by="template")["items"]:
    print(line["key"], line["cost"])

w.stop()
print(w.refresh().status)
