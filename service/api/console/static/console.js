// The tenant console: fills the page's shell from the /v1 API, with the session cookie and,
// on every request that changes something, the session's CSRF token. Text from the API is
// set as textContent, never as markup.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const POLL_MS = 2000;
const byId = (id) => document.getElementById(id);

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (method !== "GET") init.headers["X-CSRF-Token"] = CSRF;
  if (body instanceof FormData) {
    init.body = body;
  } else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const reply = await fetch(path, init);
  const found = await reply.json().catch(() => ({}));
  if (reply.status === 401) {
    window.location.assign("/console/login");
    throw new Error("signed out");
  }
  if (!reply.ok) throw new Error(found.description || `${reply.status} ${reply.statusText}`);
  return found;
}

function notice(message) {
  const p = byId("notice");
  p.textContent = message || "";
  p.hidden = !message;
}

function guarded(work) {
  return async (event) => {
    if (event) event.preventDefault();
    try {
      notice("");
      await work(event);
    } catch (error) {
      notice(error.message);
    }
  };
}

function cell(content, className) {
  const td = document.createElement("td");
  if (content instanceof Node) td.append(content);
  else td.textContent = content == null ? "–" : String(content);
  if (className) td.className = className;
  return td;
}

function heading(text, className) {
  const th = document.createElement("th");
  th.textContent = text;
  if (className) th.className = className;
  return th;
}

function link(text, href, download) {
  const a = document.createElement("a");
  a.textContent = text;
  a.href = href;
  if (download) a.download = download;
  return a;
}

function row(...cells) {
  const tr = document.createElement("tr");
  tr.append(...cells);
  return tr;
}

function showFacts(list, facts) {
  list.replaceChildren(
    ...facts.flatMap(([term, value]) => {
      const dt = document.createElement("dt");
      const dd = document.createElement("dd");
      dt.textContent = term;
      dd.textContent = String(value);
      return [dt, dd];
    }),
  );
}

const percent = (x) => (x == null ? "–" : `${(100 * x).toFixed(1)} %`);
const when = (stamp) => (stamp ? stamp.replace("T", " ").slice(0, 16) : "–");

function progressText(found) {
  const p = found.progress;
  if (!p || found.status !== "Training") return "";
  if (p.total_steps) return `${p.phase} ${Math.round((100 * (p.step || 0)) / p.total_steps)} %`;
  return p.phase || p.state || "";
}

// --- the classifiers page -------------------------------------------------------------------

async function showClassifiers() {
  const listed = await api("GET", "/v1/classifiers");
  const found = await Promise.all(
    listed.classifiers.map((c) => api("GET", `/v1/classifiers/${encodeURIComponent(c.classifier_id)}`)),
  );
  const body = byId("classifiers").tBodies[0];
  body.replaceChildren(
    ...found.map((c) =>
      row(
        cell(link(c.name, `/console/classifiers/${encodeURIComponent(c.classifier_id)}`)),
        cell(c.status),
        cell(c.serving_version == null ? "–" : `v${c.serving_version}`),
        cell(percent(c.metrics && c.metrics.accuracy), "num"),
        cell(progressText(c)),
        cell(when(c.created)),
      ),
    ),
  );
  byId("no-classifiers").hidden = found.length > 0;
  return found.some((c) => c.status === "Training");
}

async function showDatasets() {
  const found = (await api("GET", "/v1/datasets")).datasets;
  byId("datasets").tBodies[0].replaceChildren(
    ...found.map((d) => {
      const use = document.createElement("button");
      use.type = "button";
      use.textContent = "Report and train";
      use.addEventListener("click", guarded(() => showReport(d)));
      return row(cell(d.name), cell(d.rows, "num"), cell(d.classes, "num"), cell(when(d.created)), cell(use));
    }),
  );
  return found;
}

async function upload(event) {
  const form = event.target;
  const file = form.elements.file.files[0];
  const name = form.elements.name.value.trim() || file.name.replace(/\.[^.]*$/, "");
  const data = new FormData();
  data.append("training_data", file);
  const dataset = await api("POST", `/v1/datasets?name=${encodeURIComponent(name)}`, data);
  await showReport(dataset);
  await showDatasets();
}

async function showReport(dataset) {
  const report = await api("GET", `/v1/datasets/${encodeURIComponent(dataset.dataset_id)}/report`);
  byId("report-title").textContent = `Dataset “${dataset.name}”`;
  const facts = [
    ["Rows", report.rows],
    ["Distinct texts", report.texts],
    ["Classes", report.classes],
    ["Largest / smallest class", report.imbalance == null ? "–" : `${report.imbalance} ×`],
  ];
  showFacts(byId("report-facts"), facts);
  byId("report-warnings").replaceChildren(
    ...report.warnings.map((text) => {
      const li = document.createElement("li");
      li.textContent = text;
      return li;
    }),
  );
  byId("report-clean").hidden = report.warnings.length > 0;
  const train = byId("train");
  train.dataset.datasetId = dataset.dataset_id;
  train.elements.name.value = dataset.name;
  byId("report").hidden = false;
  byId("report").scrollIntoView();
}

async function train(event) {
  const form = event.target;
  const created = await api("POST", "/v1/classifiers", {
    dataset_id: form.dataset.datasetId,
    name: form.elements.name.value.trim(),
    language: form.elements.language.value,
  });
  window.location.assign(`/console/classifiers/${encodeURIComponent(created.classifier_id)}`);
}

// --- one classifier's page ------------------------------------------------------------------

const CID = document.body.dataset.classifierId;
const base = () => `/v1/classifiers/${encodeURIComponent(CID)}`;

async function showClassifier() {
  const c = await api("GET", base());
  byId("title").textContent = c.name;
  const facts = [
    ["Status", `${c.status}${c.status_description ? ` — ${c.status_description}` : ""}`],
    ["Serving version", c.serving_version == null ? "none yet" : `v${c.serving_version}`],
    ["Language", c.language],
    ["Mode", c.mode.replace("_", "-")],
    ["Model", c.model ? c.model.kind : "–"],
    ["Training", progressText(c) || "–"],
  ];
  showFacts(byId("facts"), facts);
  const bar = byId("progress");
  const p = c.progress;
  bar.hidden = !(c.status === "Training" && p && p.total_steps);
  if (!bar.hidden) bar.firstElementChild.style.width = `${(100 * (p.step || 0)) / p.total_steps}%`;
  return c;
}

async function showVersions() {
  const listed = await api("GET", `${base()}/versions`);
  const serving = listed.serving_version;
  const body = byId("versions").tBodies[0];
  body.replaceChildren(
    ...listed.versions.map((v) => {
      const m = v.metrics || {};
      const actions = document.createElement("span");
      if (v.status === "Available" && !v.serving) {
        const button = document.createElement("button");
        button.type = "button";
        button.textContent = serving != null && v.version < serving ? "Roll back to it" : "Promote";
        button.addEventListener("click", guarded(async () => {
          await api("POST", `${base()}/versions/${v.version}/promote`);
          await refresh();
        }));
        actions.append(button, " ");
      }
      if (v.status === "Available") {
        actions.append(link("Bundle", `${base()}/versions/${v.version}/bundle`, `${CID}-v${v.version}.taas`));
      }
      const name = document.createElement("span");
      name.textContent = `v${v.version}`;
      if (v.serving) {
        name.className = "serving";
        name.textContent += " (serving)";
      }
      return row(
        cell(name),
        cell(v.status === "Training" ? `Training ${progressText(v)}` : v.status),
        cell(percent(m.accuracy), "num"),
        cell(percent(m.macro_f1), "num"),
        cell(m.n, "num"),
        cell(when(v.created)),
        cell(actions),
      );
    }),
  );
  const select = byId("evaluate").elements.version;
  const available = listed.versions.filter((v) => v.status === "Available").map((v) => v.version);
  const chosen = select.value;
  select.replaceChildren(
    ...[["serving", "the serving one"], ...available.map((n) => [String(n), `v${n}`]), ["all", "every Available version"]].map(
      ([value, text]) => new Option(text, value),
    ),
  );
  if ([...select.options].some((o) => o.value === chosen)) select.value = chosen;
  return listed;
}

async function showCurves(number) {
  const h = (await api("GET", `${base()}/versions/${number}/history`)).points;
  byId("curve-title").textContent = `Training loss, version ${number}`;
  TaasCharts.line(byId("loss-chart"), [{ name: "loss", points: h.map((p) => [p.step, p.loss]) }], {
    xTitle: "step",
    yTitle: "training loss",
    emptyText: "Drawn as the training reports its steps.",
  });
  TaasCharts.line(
    byId("accuracy-chart"),
    [{ name: "validation accuracy", points: h.map((p) => [p.step, p.validation_accuracy]) }],
    {
      xTitle: "step",
      yTitle: "accuracy",
      emptyText: "Measured at each epoch's end on a validation split (none for data under ~1,000 rows).",
    },
  );
}

async function showComparison() {
  const found = (await api("GET", `${base()}/evaluations`)).evaluations; // newest first
  const versions = [...new Set(found.map((e) => e.version))].sort((a, b) => a - b);
  const names = [...new Set(found.map((e) => e.name))];
  const latest = new Map();
  for (const e of found) {
    const key = `${e.name}\u0000${e.version}`;
    if (!latest.has(key)) latest.set(key, e);
  }
  const table = byId("comparison");
  table.tHead.replaceChildren(row(heading("Test file"), ...versions.map((n) => heading(`v${n}`, "num"))));
  table.tBodies[0].replaceChildren(
    ...names.map((name) =>
      row(
        cell(name),
        ...versions.map((n) => {
          const e = latest.get(`${name}\u0000${n}`);
          if (!e) return cell("", "num");
          if (e.status === "completed") {
            const figure = e.accuracy == null ? `macro-F1 ${percent(e.macro_f1)}` : percent(e.accuracy);
            return cell(link(figure, e.report_html_url), "num");
          }
          if (e.status === "failed") return cell(`failed: ${e.error}`, "num");
          return cell(`${e.status} ${e.done}/${e.rows}`, "num");
        }),
      ),
    ),
  );
  byId("no-evaluations").hidden = found.length > 0;
  return found.some((e) => e.status === "queued" || e.status === "running");
}

async function showRetrainChoices() {
  const found = (await api("GET", "/v1/datasets")).datasets;
  const select = byId("retrain").elements.dataset_id;
  select.replaceChildren(...found.map((d) => new Option(`${d.name} (${d.rows} rows)`, d.dataset_id)));
}

async function tryText(event) {
  const text = event.target.elements.text.value;
  const answer = await api("POST", `${base()}/classify`, { text });
  byId("answer").tBodies[0].replaceChildren(
    ...answer.classes.slice(0, 5).map((c) => row(cell(c.class_name), cell(c.confidence.toFixed(3), "num"))),
  );
  byId("answer").hidden = false;
  const scope = byId("scope");
  scope.hidden = answer.out_of_scope == null;
  if (!scope.hidden) {
    scope.textContent = answer.out_of_scope
      ? `Out of scope: like none of the classes (in-scope score ${answer.in_scope_score.toFixed(3)}).`
      : `In scope (score ${answer.in_scope_score.toFixed(3)}).`;
  }
}

async function evaluate(event) {
  const form = event.target;
  const file = form.elements.file.files[0];
  const chosen = form.elements.version.value;
  const versions =
    chosen === "all"
      ? [...form.elements.version.options].map((o) => o.value).filter((v) => /^\d+$/.test(v))
      : [chosen === "serving" ? null : chosen];
  for (const version of versions) {
    const data = new FormData();
    data.append("test_data", file);
    const query = new URLSearchParams({ name: file.name });
    if (version) query.set("version", version);
    await api("POST", `${base()}/evaluate?${query}`, data);
  }
  await refresh();
}

async function retrain(event) {
  await api("POST", `${base()}/versions`, { dataset_id: event.target.elements.dataset_id.value });
  await refresh();
}

// --- polling --------------------------------------------------------------------------------

let timer = null;

async function refresh() {
  clearTimeout(timer);
  let busy = false;
  try {
    if (document.body.dataset.page === "home") {
      busy = await showClassifiers();
      await showDatasets();
    } else {
      const c = await showClassifier();
      const listed = await showVersions();
      await showCurves(c.latest_version);
      busy = c.status === "Training" || listed.versions.some((v) => v.status === "Training");
      busy = (await showComparison()) || busy;
    }
  } catch (error) {
    notice(error.message);
  }
  if (busy) timer = setTimeout(refresh, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.body.dataset.page === "home") {
    byId("upload").addEventListener("submit", guarded(upload));
    byId("train").addEventListener("submit", guarded(train));
  } else {
    byId("try").addEventListener("submit", guarded(tryText));
    byId("evaluate").addEventListener("submit", guarded(evaluate));
    byId("retrain").addEventListener("submit", guarded(retrain));
    showRetrainChoices().catch((error) => notice(error.message));
  }
  refresh();
});
