/* taas ops: fills each page from the JSON feed (/ops/api) and keeps it current by polling.
   Everything the server sends is inserted as text, never as HTML. */
"use strict";

const POLL_MS = 2000;
const CSRF = document.querySelector('meta[name="csrf-token"]')?.content || "";

async function api(path, options = {}) {
  const reply = await fetch("/ops/api" + path, {
    credentials: "same-origin",
    ...options,
    headers: { "Content-Type": "application/json", "X-CSRF-Token": CSRF, ...(options.headers || {}) },
  });
  if (reply.status === 401) {
    window.location.assign("/ops/login");
    throw new Error("session ended");
  }
  const body = await reply.json();
  if (!reply.ok) throw new Error(body.description || reply.statusText);
  return body;
}

/* Call render(await api(path())) now and every `every` ms (null: only when the returned
   function is called); shows the time of the last update. */
function poll(path, render, every = POLL_MS) {
  const live = document.getElementById("live");
  let timer = null, sent = 0;
  async function tick() {
    clearTimeout(timer);
    const mine = ++sent;
    try {
      const data = await api(path());
      // a newer request (a click on a pager or Filter) went out while this one was answered:
      // its reply is the one to show (this one rendered the old page over the new one)
      if (mine !== sent) return;
      render(data);
      // a page that does not poll (tenants) says when it was read, not that it is live
      live.textContent = (every ? "live · " : "as of ") + new Date().toLocaleTimeString();
      live.classList.remove("stale");
    } catch (error) {
      if (mine !== sent) return;
      live.textContent = "update failed: " + error.message;
      live.classList.add("stale");
    }
    if (every) timer = setTimeout(tick, every);
  }
  tick();
  return tick;
}

function el(tag, attrs = {}, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") n.className = v;
    else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v);
  }
  for (const c of children) n.append(c instanceof Node ? c : String(c ?? ""));
  return n;
}

function rows(tableId, items, cells, emptyText) {
  const body = document.querySelector(`#${tableId} tbody`);
  const width = document.querySelectorAll(`#${tableId} thead th`).length;
  if (!items.length) return body.replaceChildren(el("tr", {}, el("td", { colspan: width, class: "muted" }, emptyText)));
  body.replaceChildren(...items.map((item) => el("tr", {}, ...cells(item).map((c) => el("td", {}, c)))));
}

function facts(id, pairs) {
  document.getElementById(id).replaceChildren(
    ...pairs.filter(([, v]) => v !== undefined && v !== null && v !== "").flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]),
  );
}

const jobLink = (job) => el("a", { href: `/ops/jobs/${encodeURIComponent(job.job_id)}` }, job.classifier || job.job_id.slice(0, 8));
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
const duration = (s) => (s === null || s === undefined ? "—" : s < 90 ? `${Math.round(s)}s` : `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, "0")}s`);
const eta = (job) => (job.phase === "training" ? duration(job.eta_seconds) : "—");
const num = (v, digits = 1) => (v === null || v === undefined ? "—" : Number(v).toFixed(digits));

/* A quota as people read it: sizes in KiB/MiB/GiB, counts with separators, the share used
   (as `taas tenants quotas` prints it, service/client/units.py). */
const SIZE_UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
function size(count) {
  let value = count, unit = 0;
  while (value >= 1024 && unit < SIZE_UNITS.length - 1) { value /= 1024; unit += 1; }
  return unit === 0 ? `${count.toLocaleString("en")} bytes` : `${value.toFixed(1).replace(/\.0$/, "")} ${SIZE_UNITS[unit]}`;
}
function share(used, limit) {
  if (limit <= 0) return used ? "over" : "no room";
  const percent = (100 * used) / limit;
  return percent > 0 && percent < 0.1 ? "<0.1%" : `${percent.toFixed(1).replace(/\.0$/, "")}%`;
}
function quotaText(name, used, limit) {
  const amount = (v) => (name === "dataset_bytes" ? size(v) : Number(v).toLocaleString("en"));
  if (name === "classify_rps") return `${name}: ${amount(limit)} texts/s`;
  if (used === undefined || used === null) return `${name}: ${amount(limit)}`;
  return `${name}: ${amount(used)} of ${amount(limit)} (${share(used, limit)})`;
}

/* The evaluation's per-class table, the lowest F1 first (the classes to look at): the first
   PER_CLASS_SHOWN, and a button for the rest. */
const PER_CLASS_SHOWN = 15;
let perClassAll = false;
function perClass(table) {
  const classes = Object.entries(table).sort(([a, x], [b, y]) => x.f1 - y.f1 || y.support - x.support || a.localeCompare(b));
  const shown = perClassAll ? classes : classes.slice(0, PER_CLASS_SHOWN);
  rows("per-class", shown, ([name, c]) => [name, num(c.precision, 3), num(c.recall, 3), num(c.f1, 3),
    Number(c.support).toLocaleString("en")], "No per-class figures.");
  const more = document.getElementById("per-class-all");
  more.hidden = perClassAll || classes.length <= PER_CLASS_SHOWN;
  more.textContent = `Show all ${classes.length} classes`;
  more.onclick = () => { perClassAll = true; perClass(table); };
}

function progressBar(job) {
  const pct = Math.round(100 * (job.fraction || 0));
  const filled = el("span");
  filled.style.width = `${pct}%`;  // a style attribute would be an inline style, which the CSP blocks
  return el("span", { class: "progress", title: `${job.phase}: step ${job.step ?? 0} of ${job.total_steps ?? "?"}` },
    el("span", { class: "bar" }, filled), ` ${pct}% · ${job.phase}`);
}

const pages = {
  overview() {
    poll(() => "/overview", (data) => {
      const tiles = [["Queue depth", data.queue_depth], ...Object.entries(data.jobs_by_state),
        ["Workers alive", data.workers.length], ["Workers training", data.workers.filter((w) => w.job_id).length]];
      document.getElementById("tiles").replaceChildren(
        ...tiles.map(([k, v]) => el("div", { class: "tile" }, el("b", {}, v), el("span", {}, k))));
      rows("running", data.running, (j) => [jobLink(j), j.tenant, progressBar(j), eta(j),
        num(j.samples_per_second, 0), j.worker || ""], "No job is training.");
      rows("workers", data.workers, (w) => [w.host, w.pid, w.device, w.learners,
        w.job_id ? el("span", { class: "ok" }, "training ", jobLink(w)) : el("span", { class: "muted" }, "idle"),
        `${duration(w.heartbeat_age_seconds)} ago`], data.workers_error || "No worker is running.");
      TaasCharts.line(document.getElementById("throughput"),
        [{ name: "samples/s", points: data.throughput.map((p) => [p.t, p.samples_per_second]) }],
        { time: true, yMin: 0, xTitle: "time", yTitle: "samples/s" });
      TaasCharts.line(document.getElementById("active-history"), [
        { name: "queued", points: data.active_history.map((p) => [p.t, p.queued]) },
        { name: "training", points: data.active_history.map((p) => [p.t, p.training]) },
      ], { time: true, yMin: 0, integer: true, xTitle: "time", yTitle: "jobs" });
      rows("attention", data.attention, (e) => [when(e.at), el("span", { class: `event ${e.event}` }, e.event),
        jobLink(e), e.tenant, e.detail || ""], "No failures or resumes in the last day.");
    });
  },

  jobs() {
    const form = document.getElementById("filters");
    let page = 1, pages = 1, filled = false, filters = new FormData(form);  // as last submitted
    const query = () => {
      const q = new URLSearchParams({ page });
      if (!filled) q.set("choices", "true");  // the tenants and states to filter by: once
      for (const [k, v] of filters) {
        if (v) q.set(k, k === "since" || k === "until" ? new Date(v).toISOString() : v);
      }
      return "/jobs?" + q;
    };
    const refresh = poll(query, (data) => {
      if (!filled && data.tenants) {
        filled = true;
        form.tenant.append(...data.tenants.map((t) => el("option", { value: t.tenant_id }, t.name)));
        form.state.append(...data.states.map((s) => el("option", { value: s }, s)));
      }
      pages = data.pages;
      if (data.page > pages) { page = pages; return refresh(); }  // fewer pages now (or none: page 1)
      page = data.page;
      rows("jobs", data.jobs, (j) => [jobLink(j), j.tenant, j.state, progressBar(j), `${j.attempts} (${j.failures} failed)`,
        when(j.created)], "No job matches.");
      document.getElementById("pageinfo").textContent = `page ${page} of ${pages} · ${data.total} jobs`;
    });
    form.addEventListener("submit", (e) => { e.preventDefault(); filters = new FormData(form); page = 1; refresh(); });
    document.getElementById("prev").addEventListener("click", () => { if (page > 1) { page--; refresh(); } });
    document.getElementById("next").addEventListener("click", () => { if (page < pages) { page++; refresh(); } });
  },

  job() {
    const id = document.body.dataset.jobId;
    poll(() => `/jobs/${encodeURIComponent(id)}`, (job) => {
      document.getElementById("title").textContent = `${job.classifier} · ${job.tenant}`;
      facts("facts", [["Job", job.job_id], ["State", `${job.state} (${job.phase})`], ["Version", `${job.model.version}${job.model.serving ? " (serving)" : ""}: ${job.model.status}`],
        ["Epoch", job.epoch], ["Step", job.total_steps ? `${job.step} of ${job.total_steps}` : job.step],
        ["Loss", job.loss === null || job.loss === undefined ? "—" : Number(job.loss).toPrecision(3)], ["Samples/s", num(job.samples_per_second, 0)], ["ETA", eta(job)],
        ["K learners", job.learners], ["Worker", job.worker], ["Attempts", `${job.attempts} (${job.failures} failed)`],
        ["Checkpoint at step", job.checkpoint_step], ["Error", job.error]]);
      document.getElementById("bar").style.width = `${Math.round(100 * job.fraction)}%`;
      const h = job.history;
      TaasCharts.line(document.getElementById("loss-chart"), [{ name: "loss", points: h.map((p) => [p.step, p.loss]) }],
        { xTitle: "step", yTitle: "training loss" });
      TaasCharts.line(document.getElementById("accuracy-chart"),
        [{ name: "validation accuracy", points: h.map((p) => [p.step, p.validation_accuracy]) }],
        { emptyText: "Measured at each epoch's end on the validation split (none for data under ~1,000 rows).",
          xTitle: "step", yTitle: "accuracy" });
      TaasCharts.line(document.getElementById("rate-chart"),
        [{ name: "samples/s", points: h.map((p) => [p.t, p.samples_per_second]) }],
        { time: true, yMin: 0, xTitle: "time", yTitle: "samples/s" });
      const ps = job.progress.ps || {};
      facts("ps", [["Version", ps.version], ["Pushed", ps.pushed], ["Applied", ps.applied],
        ["Direct", ps.direct], ["Learner respawns", ps.respawns], ["Push / pull / apply s",
          ps.push_s === undefined ? undefined : `${num(ps.push_s, 2)} / ${num(ps.pull_s, 2)} / ${num(ps.apply_s, 2)}`],
        ["Waited at the staleness bound s", ps.wait_s === undefined ? undefined : num(ps.wait_s, 2)]]);
      TaasCharts.bars(document.getElementById("staleness-chart"), ["0", "1", "2", "3", "4-7", "8-15", "16+"],
        ps.staleness_histogram || [], { xTitle: "versions behind when applied", yTitle: "updates" });
      const metrics = job.model.metrics;
      document.getElementById("quality").hidden = !metrics;
      if (metrics) {
        const confusion = metrics.confusion;
        const classes = Object.keys(metrics.per_class || {}).length;
        facts("metrics", [["Accuracy", num(metrics.accuracy, 3)], ["Macro F1", num(metrics.macro_f1, 3)],
          ["Evaluated on", `${metrics.n} ${metrics.evaluated_on || ""} rows`],
          ["Out of scope", metrics.out_of_scope ? `in_scope_score below ${num(metrics.out_of_scope.rate, 3)} `
            + `(about ${num(100 * metrics.out_of_scope.rate, 1)} % of in-scope texts)` : undefined],
          ["Confusion matrix", confusion && confusion.truncated
            ? `the ${confusion.labels.length} classes most involved in errors, of ${classes || "more"}` : undefined]]);
        if (metrics.confusion) TaasCharts.heatmap(document.getElementById("confusion"), metrics.confusion.labels, metrics.confusion.matrix);
        perClass(metrics.per_class || {});
      }
      rows("events", job.events, (e) => [when(e.at), el("span", { class: `event ${e.event}` }, e.event), e.worker || "",
        e.attempt, e.step ?? "", e.detail || ""], "No events.");
    });
  },

  tenants() {
    const issued = document.getElementById("issued");
    const form = document.getElementById("filters");
    let page = 1, pages = 1, name = "";  // the name as last submitted (Find), not as being typed
    const act = async (path, body, message) => {
      try {
        const reply = await api(path, { method: "POST", body: JSON.stringify(body) });
        if (typeof message === "function") message = message(reply);
        issued.textContent = reply.api_key ? `${message}: ${reply.api_key} (shown once; copy it now)` : message;
      } catch (error) {
        issued.textContent = "Failed: " + error.message;
      }
      issued.hidden = false;
      refresh();
    };
    const refresh = poll(() => "/tenants?" + new URLSearchParams({ page, name }), (data) => {
      pages = data.pages;
      if (data.page > pages) { page = pages; return refresh(); }  // fewer pages now (or none: page 1)
      page = data.page;
      document.getElementById("pageinfo").textContent = `page ${page} of ${pages} · ${data.total} tenants`;
      if (!data.tenants.length) {
        return document.getElementById("tenants").replaceChildren(el("p", { class: "card muted" }, "No tenant matches."));
      }
      document.getElementById("tenants").replaceChildren(...data.tenants.map((t) => {
        const base = `/tenants/${encodeURIComponent(t.tenant_id)}/keys`;
        const quota = Object.entries(t.quotas).map(([k, v]) => quotaText(k, t.usage[k], v)).join(" · ");
        return el("section", { class: "card" },
          el("h2", {}, t.name), el("p", { class: "muted" }, `${t.tenant_id} · since ${when(t.created)}`),
          el("p", {}, quota),
          el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Key"), el("th", {}, "Created"), el("th", {}, "State"), el("th", {}, ""))),
            el("tbody", {}, ...t.keys.map((k) => el("tr", {}, el("td", {}, k.prefix + "…"), el("td", {}, when(k.created)),
              el("td", {}, k.revoked ? `revoked ${when(k.revoked)}` : "active"),
              el("td", {}, k.revoked ? "" : el("button", { type: "button", class: "danger",
                onclick: () => confirm(`Revoke key ${k.prefix}… of ${t.name}?`) &&
                  act(`${base}/${encodeURIComponent(k.key_id)}/revoke`, {}, `Revoked ${k.prefix}…`) }, "Revoke")))))),
          el("p", {}, el("button", { type: "button", onclick: () => act(base, { revoke_others: false }, `New key for ${t.name}`) }, "New key"),
            " ", el("button", { type: "button", class: "danger", onclick: () => confirm(`Rotate: new key, revoke every other key of ${t.name}?`) &&
              act(base, { revoke_others: true }, `Rotated key of ${t.name}`) }, "Rotate (revoke others)"),
            " ", el("button", { type: "button", class: "danger", onclick: () => {
              const typed = prompt(`Delete ${t.name} with every key, classifier, dataset and file? This cannot be undone. Type the tenant's name to confirm.`);
              if (typed === null) return;  // cancelled
              if (typed !== t.name) {  // said so: a mistyped name did nothing, silently
                issued.textContent = `The name typed is not ${t.name}'s; nothing was deleted.`;
                issued.hidden = false;
                return;
              }
              act(`/tenants/${encodeURIComponent(t.tenant_id)}/delete`, {},
                (r) => `Deleted ${t.name}: ${r.classifiers} classifiers, ${r.datasets} datasets`);
            } }, "Delete tenant")),
          el("details", {}, el("summary", {}, `${t.usage.classifiers} classifiers`),
            el("ul", {}, ...t.classifiers.map((c) => el("li", {}, `${c.name} — ${c.status}`)),
              ...(t.usage.classifiers > t.classifiers.length
                ? [el("li", { class: "muted" }, `and ${t.usage.classifiers - t.classifiers.length} older`)] : []))));
      }));
    }, null);
    form.addEventListener("submit", (e) => { e.preventDefault(); name = form.name.value; page = 1; refresh(); });
    document.getElementById("prev").addEventListener("click", () => { if (page > 1) { page--; refresh(); } });
    document.getElementById("next").addEventListener("click", () => { if (page < pages) { page++; refresh(); } });
  },
};

document.addEventListener("DOMContentLoaded", () => pages[document.body.dataset.page]?.());
