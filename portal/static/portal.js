// The catalog page: lists the live templates from the API. The full portal
// (launch form, my workloads, advice) builds on this.
(async function () {
  const body = document.querySelector('#templates tbody');
  const status = document.getElementById('status');
  try {
    const resp = await fetch('/api/v1/templates', { headers: { Accept: 'application/json' } });
    if (!resp.ok) {
      const p = await resp.json();
      status.textContent = p.title + (p.detail ? ': ' + p.detail : '');
      return;
    }
    const list = await resp.json();
    for (const v of list.items) {
      const t = v.template, g = t.spec.gpu;
      const tr = document.createElement('tr');
      for (const text of [t.metadata.name, t.metadata.title, t.spec.workload,
        g.count.default + ' × ' + (g.defaultMigProfile ? g.defaultClass + ' MIG ' + g.defaultMigProfile : g.defaultClass), v.version]) {
        const td = document.createElement('td');
        td.textContent = text; // never innerHTML: template text is data
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    status.textContent = list.items.length + ' templates';
  } catch (e) {
    status.textContent = 'Could not load templates: ' + e;
  }
})();
