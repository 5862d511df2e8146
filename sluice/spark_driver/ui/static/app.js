// The streaming page: polls the JSON API every second and draws the charts on <canvas>.
// Hand-written, no framework and no network beyond this driver: the page works offline.
// The batches and rate decisions are pulled as changes since the version the page holds (the
// store's counter), so a poll carries what is new, not the thousand batches kept; the receivers
// come a page at a time.
"use strict";

const API = "/api/v1/streaming/";
const POLL_MS = 1000;
const ROWS_SHOWN = 100;
const RECEIVERS_SHOWN = 50; // a page of receivers (the API gives up to 100 without their event rates)
const PULLS = 40; // change pages fetched in one poll at most: 10,000 changes, a full store several times

// Each statistic: its label, unit, and how it is read from a batch of /batches.
const METRICS = [
  { key: "inputRate", label: "Input rate", unit: "records/s", get: (b) => b.inputRate },
  { key: "records", label: "Records per batch", unit: "records", get: (b) => b.inputSize },
  { key: "scheduling", label: "Scheduling delay", unit: "ms", get: (b) => b.schedulingDelay },
  { key: "processing", label: "Processing time", unit: "ms", get: (b) => b.processingTime },
  { key: "total", label: "Total delay", unit: "ms", get: (b) => b.totalDelay },
];

const state = {
  updates: 0, selected: null, epoch: null, version: 0, batches: new Map(), decisions: [], receiversOffset: 0,
  busy: false, // a refresh in flight: the next tick waits for it, so two never pull the same changes
};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : child === null || child === undefined ? "" : String(child));
  }
  return node;
}

function fmt(value, digits) {
  if (value === null || value === undefined) return "-";
  if (typeof value !== "number") return String(value);
  return value.toLocaleString(undefined, { maximumFractionDigits: digits === undefined ? 0 : digits });
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString(undefined, { hour12: false });
}

async function getJSON(path) {
  const response = await fetch(API + path, { cache: "no-store" });
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

// -- drawing -------------------------------------------------------------------------------------

function prepare(canvas) {
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.font = "11px system-ui, sans-serif";
  return ctx;
}

function axes(ctx, canvas, pad, yMax, yLabel) {
  const h = canvas.height - pad.top - pad.bottom;
  ctx.strokeStyle = "#999";
  ctx.fillStyle = "#555";
  ctx.beginPath();
  ctx.moveTo(pad.left, pad.top);
  ctx.lineTo(pad.left, pad.top + h);
  ctx.lineTo(canvas.width - pad.right, pad.top + h);
  ctx.stroke();
  ctx.textAlign = "right";
  ctx.fillText(fmt(yMax), pad.left - 4, pad.top + 8);
  ctx.fillText("0", pad.left - 4, pad.top + h);
  ctx.textAlign = "left";
  ctx.fillText(yLabel, pad.left + 4, pad.top + 8);
}

// A line over time; points are [timeMs, value]; marks are [timeMs, value, shape, colour].
function timeline(canvas, points, unit, marks) {
  const ctx = prepare(canvas);
  const pad = { left: 56, right: 10, top: 10, bottom: 18 };
  const all = points.concat(marks || []);
  canvas.dataset.points = String(points.length);
  if (all.length === 0) {
    ctx.fillStyle = "#999";
    ctx.fillText("no data yet", pad.left + 8, canvas.height / 2);
    return;
  }
  const t0 = Math.min(...all.map((p) => p[0]));
  const t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
  const yMax = Math.max(1, ...all.map((p) => p[1])) * 1.1;
  const w = canvas.width - pad.left - pad.right;
  const h = canvas.height - pad.top - pad.bottom;
  const x = (t) => pad.left + ((t - t0) / (t1 - t0)) * w;
  const y = (v) => pad.top + h - (v / yMax) * h;
  axes(ctx, canvas, pad, yMax, unit);
  ctx.textAlign = "left";
  ctx.fillText(clock(t0), pad.left, canvas.height - 4);
  ctx.textAlign = "right";
  ctx.fillText(clock(t1), canvas.width - pad.right, canvas.height - 4);
  ctx.strokeStyle = "#1f77b4";
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  points.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p[0]), y(p[1])) : ctx.lineTo(x(p[0]), y(p[1]))));
  ctx.stroke();
  ctx.lineWidth = 1;
  for (const [t, v, shape, colour] of marks || []) mark(ctx, x(t), y(v), shape, colour);
}

function mark(ctx, x, y, shape, colour) {
  ctx.fillStyle = colour;
  ctx.beginPath();
  if (shape === "down") {
    ctx.moveTo(x - 5, y - 4); ctx.lineTo(x + 5, y - 4); ctx.lineTo(x, y + 5);
  } else if (shape === "up") {
    ctx.moveTo(x - 5, y + 4); ctx.lineTo(x + 5, y + 4); ctx.lineTo(x, y - 5);
  } else if (shape === "diamond") {
    ctx.moveTo(x, y - 5); ctx.lineTo(x + 5, y); ctx.lineTo(x, y + 5); ctx.lineTo(x - 5, y);
  } else {
    ctx.arc(x, y, 2.5, 0, 2 * Math.PI);
  }
  ctx.fill();
}

// Counts of values in ten equal bins from 0 to the largest value.
function histogram(canvas, values, unit) {
  const ctx = prepare(canvas);
  const pad = { left: 40, right: 10, top: 10, bottom: 18 };
  canvas.dataset.points = String(values.length);
  if (values.length === 0) {
    ctx.fillStyle = "#999";
    ctx.fillText("no data yet", pad.left + 8, canvas.height / 2);
    return;
  }
  const bins = 10;
  const top = Math.max(1, ...values);
  const counts = new Array(bins).fill(0);
  for (const v of values) counts[Math.min(bins - 1, Math.floor((v / top) * bins))] += 1;
  const most = Math.max(...counts);
  const w = (canvas.width - pad.left - pad.right) / bins;
  const h = canvas.height - pad.top - pad.bottom;
  axes(ctx, canvas, pad, most, "batches");
  ctx.fillStyle = "#1f77b4";
  counts.forEach((c, i) => {
    const bh = (c / most) * h;
    ctx.fillRect(pad.left + i * w + 1, pad.top + h - bh, w - 2, bh);
  });
  ctx.fillStyle = "#555";
  ctx.textAlign = "left";
  ctx.fillText("0", pad.left, canvas.height - 4);
  ctx.textAlign = "right";
  ctx.fillText(fmt(top) + " " + unit, canvas.width - pad.right, canvas.height - 4);
}

// -- sections ------------------------------------------------------------------------------------

function buildCharts() {
  const body = document.getElementById("charts");
  for (const m of METRICS) {
    const label = el("td", { class: "label" }, m.label);
    label.append(el("br"), el("span", { class: "value", id: "avg-" + m.key }, "-"), " " + m.unit);
    const line = el("canvas", { id: "timeline-" + m.key, width: "620", height: "130" });
    const bars = el("canvas", { id: "histogram-" + m.key, width: "300", height: "130" });
    const row = el("tr");
    row.append(label, el("td"), el("td"));
    row.children[1].append(line);
    row.children[2].append(bars);
    body.append(row);
  }
}

function showStatistics(stats, batches) {
  const done = batches.filter((b) => b.status === "COMPLETED").reverse();
  for (const m of METRICS) {
    const points = done.filter((b) => m.get(b) !== null).map((b) => [b.batchTimeMs, m.get(b)]);
    const values = points.map((p) => p[1]);
    const avg = values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
    document.getElementById("avg-" + m.key).textContent = fmt(avg, 1);
    timeline(document.getElementById("timeline-" + m.key), points, m.unit);
    histogram(document.getElementById("histogram-" + m.key), values, m.unit);
  }
  document.getElementById("summary").textContent =
    "Running since " + stats.startTime + " · batch interval " + fmt(stats.batchDuration) + " ms · " +
    fmt(stats.numTotalCompletedBatches) + " completed batches, " + fmt(stats.numActiveBatches) + " active · " +
    fmt(stats.numProcessedRecords) + " records processed · receivers " + stats.numActiveReceivers + " active, " +
    stats.numInactiveReceivers + " inactive";
}

// A decision's mark: an in-flight cut, a slow-start probe, or by what triggered it.
function decisionMark(d) {
  const reason = (d.reason || "").toLowerCase();
  if (reason.includes("probe") || reason.includes("slow")) return ["up", "#2ca02c"];
  if (reason.includes("cut")) return ["down", "#d62728"];
  if (d.trigger === "in-flight") {
    return d.previousRate !== null && d.rate < d.previousRate ? ["down", "#d62728"] : ["diamond", "#9467bd"];
  }
  return ["dot", "#1f77b4"];
}

function showRates(decisions) {
  const points = decisions.map((d) => [d.timeMs, d.rate]);
  const marks = decisions.map((d) => [d.timeMs, d.rate, ...decisionMark(d)]);
  timeline(document.getElementById("rates"), points, "records/s", marks);
  const last = decisions[decisions.length - 1];
  document.getElementById("last-decision").textContent = last
    ? "Last: " + fmt(last.rate) + " records/s on stream " + last.stream + " after " + last.trigger +
      (last.reason ? " (" + last.reason + ")" : "") + " at " + clock(last.timeMs)
    : "no decision yet";
}

function showReceivers(receivers, total) {
  const first = receivers.length ? state.receiversOffset + 1 : 0;
  document.getElementById("receivers-range").textContent =
    fmt(first) + "–" + fmt(state.receiversOffset + receivers.length) + " of " + fmt(total);
  document.getElementById("receivers-prev").disabled = state.receiversOffset === 0;
  document.getElementById("receivers-next").disabled = state.receiversOffset + RECEIVERS_SHOWN >= total;
  const body = document.getElementById("receivers");
  body.replaceChildren(
    ...receivers.map((r) =>
      el("tr", {}, ...[
        r.receiverId, r.streamId, r.isActive === null ? "-" : r.isActive ? "active" : "inactive", r.executorHost,
        fmt(r.rate, 1), fmt(r.avgEventRate, 1), fmt(r.lag), fmt(r.openTransactionRecords), r.lastErrorMessage || "-",
      ].map((v) => el("td", {}, v === null || v === undefined ? "-" : v)))
    )
  );
}

function showTracker(tracker) {
  const list = document.getElementById("tracker");
  const rows = [["address", tracker.address], ["reachable", tracker.reachable ? "yes" : "no: " + (tracker.error || "")]];
  const { nodes, ...fields } = tracker.status || {};
  for (const n of nodes || []) {
    const since = n.leaderSinceMs ? ", leads since " + clock(n.leaderSinceMs) : "";
    rows.push(["node " + n.address, n.reachable ? n.role + ", log position " + fmt(n.logPosition) + since
      : "unreachable: " + (n.error || "")]);
  }
  for (const [k, v] of Object.entries(fields)) rows.push([k, typeof v === "object" ? JSON.stringify(v) : v]);
  list.replaceChildren();
  for (const [k, v] of rows) {
    const role = /leader|standby|role|^node /i.test(k) ? "role" : "";
    list.append(el("dt", { class: role }, k), el("dd", { class: role }, v === null || v === undefined ? "-" : v));
  }
}

function showBatches(batches) {
  document.getElementById("batch-count").textContent = "(" + batches.length + " retained, newest first)";
  const body = document.getElementById("batches");
  body.replaceChildren(
    ...batches.slice(0, ROWS_SHOWN).map((b) => {
      const row = el("tr", { "data-batch": String(b.batchId) }, ...[
        clock(b.batchTimeMs), fmt(b.inputSize), fmt(b.schedulingDelay), fmt(b.processingTime), fmt(b.totalDelay),
      ].map((v) => el("td", {}, v)));
      row.append(el("td", { class: "status-" + b.outcome }, b.outcome), el("td", {}, b.retries),
        el("td", {}, fmt(b.numBlocks)), el("td", {}, fmt(b.skippedBlocks)));
      row.addEventListener("click", () => showDetail(b.batchId));
      return row;
    })
  );
}

async function showDetail(batchId) {
  state.selected = batchId;
  const b = await getJSON("batches/" + batchId);
  document.getElementById("detail-title").textContent = "Batch " + clock(b.batchTimeMs) + " (" + b.batchId + ")";
  const fields = document.getElementById("detail-fields");
  fields.replaceChildren();
  for (const k of ["status", "outcome", "inputSize", "submissionTime", "processingStartTime", "processingEndTime",
    "schedulingDelay", "processingTime", "totalDelay", "retries", "numBlocks", "skippedBlocks", "firstFailureReason"]) {
    fields.append(el("dt", {}, k), el("dd", {}, b[k] === null || b[k] === undefined ? "-" : b[k]));
  }
  document.getElementById("detail-blocks").replaceChildren(
    ...b.blocks.map((k) => el("tr", {}, ...[k.blockId, k.streamId, k.receiverId, fmt(k.numRecords), k.location]
      .map((v) => el("td", {}, v))))
  );
  document.getElementById("detail-stages").replaceChildren(
    ...(b.stages || []).map((s) => el("tr", {}, ...[s.stage, fmt(s.p50), fmt(s.p99)].map((v) => el("td", {}, v))))
  );
  document.getElementById("detail-outputs").replaceChildren(
    ...(b.outputs || []).map((o) => el("tr", {}, ...[o.topic === null ? "(each row's)" : o.topic, o.mode,
      fmt(o.records), o.committed + o.written, o.already, o.aborted, o.empty].map((v) => el("td", {}, v))))
  );
  document.getElementById("detail").hidden = false;
}

// What changed since the version held, page after page until nothing more is waiting. A reset
// (a restarted driver, or a page too far behind) drops what is held and starts from nothing.
async function pull() {
  for (let i = 0; i < PULLS; i++) {
    const epoch = state.epoch === null ? "" : "&epoch=" + state.epoch;
    const c = await getJSON("changes?since=" + state.version + epoch);
    if (c.reset || c.epoch !== state.epoch) {
      state.batches.clear();
      state.decisions = [];
    }
    for (const b of c.batches) state.batches.set(b.batchId, b);
    for (const id of c.removed) state.batches.delete(id);
    state.decisions.push(...c.rates);
    if (state.decisions.length > c.retainedRates) state.decisions.splice(0, state.decisions.length - c.retainedRates);
    state.epoch = c.epoch;
    state.version = c.version;
    if (!c.more) return;
  }
}

function receiversPath() {
  return "receivers?eventRates=false&length=" + RECEIVERS_SHOWN + "&offset=" + state.receiversOffset;
}

// Fetch failures (the driver stopping, a restart) are shown and retried; a failure to draw what
// was fetched is a bug of the page and is left uncaught, for the console and the browser test.
async function refresh() {
  if (state.busy) return;
  const error = document.getElementById("error");
  let answers;
  state.busy = true;
  try {
    await pull();
    answers = await Promise.all(["statistics", receiversPath(), "tracker"].map(getJSON));
  } catch (e) {
    error.textContent = "The driver did not answer (" + e.message + "); retrying every second.";
    error.hidden = false;
    return;
  } finally {
    state.busy = false;
  }
  const [stats, receivers, tracker] = answers;
  const batches = [...state.batches.values()].sort((a, b) => b.batchId - a.batchId);
  error.hidden = true;
  showStatistics(stats, batches);
  showRates(state.decisions);
  showReceivers(receivers, stats.numReceivers);
  showTracker(tracker);
  showBatches(batches);
  state.updates += 1;
  document.body.dataset.updates = String(state.updates);
}

buildCharts();
document.getElementById("detail-close").addEventListener("click", () => {
  document.getElementById("detail").hidden = true;
});
document.getElementById("receivers-prev").addEventListener("click", () => {
  state.receiversOffset = Math.max(0, state.receiversOffset - RECEIVERS_SHOWN);
  refresh();
});
document.getElementById("receivers-next").addEventListener("click", () => {
  state.receiversOffset += RECEIVERS_SHOWN;
  refresh();
});
refresh();
setInterval(refresh, POLL_MS);
