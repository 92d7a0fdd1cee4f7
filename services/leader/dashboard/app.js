// shoal dashboard: renders the leader's /status document, live over /events (SSE).
// No framework, no build step. Every value from the document goes in through textContent
// or a data attribute, never as HTML. Stable hooks for tests: #partition-grid (data-
// generation, data-partitions), .cell[data-partition][data-owner][data-generation]
// [data-lag][data-holder], #members-body tr[data-member], #rebalances li[data-generation],
// #scaling li[data-rule], #leader-id[data-leader], #leader-term, body[data-state],
// #backends[data-coordination][data-transport][data-mode], .cell[data-oldest] (.alerting),
// #oldest-unacked[data-age][data-alerting], #backlog-alert[data-partitions],
// #projects-body tr[data-project], #table-panel[data-state] (absent, off, live, failing),
// #table-files[data-files][data-small], #table-log[data-log-files][data-log-bytes],
// #table-compaction[data-at], #table-vacuum[data-at], #table-error.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const COLUMNS = 16;
  const STALE_MS = 5000;
  const LAG_FULL = 10000; // a lag bar is full at this many waiting messages (log scale)
  const num = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
  const int = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

  let cells = [];
  let lastUpdate = 0;
  let updates = 0;
  let source = null;
  let pollTimer = null;

  // --- colors: distinct for up to 12 members, and a member keeps its color -----------------
  // A member gets its hash's palette slot if free, else the next free one, the first time
  // this page sees it (members are met in sorted order, so two pages showing the same
  // members agree). Past 12 members, colors come from the hash alone.
  const PALETTE = [
    "#8cb4e0", "#f5a05a", "#74b96b", "#c39bc0", "#efd35f", "#7cc4bd",
    "#f29bb0", "#b39882", "#a3d9f5", "#d4e88a", "#9fa8f0", "#f0b9a0",
  ];
  const colors = new Map();
  function hash(text) {
    let h = 2166136261; // FNV-1a, 32 bits
    for (let i = 0; i < text.length; i++) {
      h ^= text.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    return h >>> 0;
  }
  function colorOf(member) {
    let color = colors.get(member);
    if (color) return color;
    const taken = new Set(colors.values());
    const start = hash(member) % PALETTE.length;
    for (let i = 0; i < PALETTE.length && !color; i++) {
      const candidate = PALETTE[(start + i) % PALETTE.length];
      if (!taken.has(candidate)) color = candidate;
    }
    if (!color) color = `hsl(${hash(member) % 360} 55% ${62 + (hash(member) >>> 9) % 3 * 7}%)`;
    colors.set(member, color);
    return color;
  }
  function meet(ids) {
    for (const id of [...ids].sort()) colorOf(id);
  }

  // --- small helpers -----------------------------------------------------------------------
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function ownersOf(entry) {
    const owner = entry.owner;
    if (owner === null || owner === undefined || owner === "") return [];
    return Array.isArray(owner) ? owner.map(String) : [String(owner)];
  }
  function isNumber(value) {
    return typeof value === "number" && Number.isFinite(value);
  }
  function clock(epochSeconds) {
    if (!isNumber(epochSeconds)) return "";
    const when = new Date(epochSeconds * 1000);
    const ago = Math.max(0, Math.round(Date.now() / 1000 - epochSeconds));
    const agoText = ago < 90 ? `${ago} s ago` : ago < 5400 ? `${Math.round(ago / 60)} min ago` : `${Math.round(ago / 3600)} h ago`;
    return `${when.toLocaleTimeString("en-GB", { hour12: false })} (${agoText})`;
  }
  function seconds(value) {
    if (!isNumber(value)) return "";
    if (value < 1) return `${num.format(value * 1000)} ms`;
    return `${num.format(value)} s`;
  }
  function replaceChildren(parent, children) {
    parent.replaceChildren(...children);
  }

  // --- header --------------------------------------------------------------------------------
  function renderHeader(doc) {
    const leader = doc.leader;
    const leaderEl = $("leader-id");
    leaderEl.textContent = leader && leader.id ? leader.id : "none elected";
    leaderEl.dataset.leader = leader && leader.id ? leader.id : "";
    $("leader-term").textContent = leader && isNumber(leader.term) ? String(leader.term) : "–";
    $("generation").textContent = isNumber(doc.generation) ? String(doc.generation) : "–";
    const served = doc.served_by || {};
    const servedEl = $("served-by");
    servedEl.textContent = served.id || "–";
    servedEl.dataset.role = served.id ? (served.active ? "active" : "standby") : "";
    const backends = doc.backends || {};
    const backendsEl = $("backends");
    const mode = doc.group && doc.group.mode ? ` · ${doc.group.mode} consumption` : "";
    backendsEl.textContent = backends.coordination
      ? `${backends.coordination} coordination · ${backends.transport} transport${mode}`
      : "–";
    backendsEl.dataset.coordination = backends.coordination || "";
    backendsEl.dataset.transport = backends.transport || "";
    backendsEl.dataset.mode = (doc.group && doc.group.mode) || "";
    const members = Array.isArray(doc.members) ? doc.members : [];
    const rate = members.reduce((sum, m) => sum + (isNumber(m.rate) ? m.rate : 0), 0);
    $("throughput").textContent = `${num.format(rate)} msg/s`;
    $("throughput").dataset.rate = String(rate);
    const group = doc.group || null;
    const lags = (doc.partitions || []).map((p) => p.lag).filter(isNumber);
    // The group's own total when the leader gives one (older leaders: summed here).
    const totalLag = group && isNumber(group.total_lag) ? group.total_lag : lags.reduce((a, b) => a + b, 0);
    const known = group ? isNumber(group.total_lag) : lags.length > 0;
    $("total-lag").textContent = known ? int.format(totalLag) : "n/a";
    $("total-lag").dataset.lag = known ? String(totalLag) : "";
    const oldest = $("oldest-unacked");
    const age = group ? group.max_oldest_unacked_age_s : null;
    const alerting = group && Array.isArray(group.alerting) ? group.alerting : [];
    oldest.textContent = isNumber(age) ? seconds(age) : group ? "none" : "–";
    oldest.dataset.age = isNumber(age) ? String(age) : "";
    oldest.dataset.alerting = alerting.length ? "1" : "";
    const alert = $("backlog-alert");
    alert.hidden = alerting.length === 0;
    alert.dataset.partitions = alerting.join(",");
    alert.textContent = alerting.length
      ? `Oldest unacked message older than ${seconds(group.alert_age_s)} on partition` +
        `${alerting.length === 1 ? "" : "s"} ${alerting.join(", ")}`
      : "";
  }

  // --- partition grid ------------------------------------------------------------------------
  function ensureCells(count) {
    if (cells.length === count) return;
    const grid = $("partition-grid");
    cells = [];
    const nodes = [];
    for (let p = 0; p < count; p++) {
      const cell = el("div", "cell");
      cell.id = `p-${p}`;
      cell.setAttribute("role", "gridcell");
      cell.dataset.partition = String(p);
      cell.dataset.owner = "";
      cell.append(el("span", "p", p), el("span", "lag"), el("span", "lagbar"));
      cells.push(cell);
      nodes.push(cell);
    }
    replaceChildren(grid, nodes);
    grid.style.setProperty("grid-template-columns", `repeat(${Math.min(COLUMNS, Math.max(count, 1))}, var(--cell))`);
  }

  function renderGrid(doc) {
    const partitions = Array.isArray(doc.partitions) ? doc.partitions : [];
    const alerting = new Set(doc.group && Array.isArray(doc.group.alerting) ? doc.group.alerting : []);
    ensureCells(partitions.length);
    const counts = new Map();
    for (const entry of partitions) {
      const p = entry.partition;
      const cell = cells[p];
      if (!cell) continue;
      const owners = ownersOf(entry);
      for (const o of owners) counts.set(o, (counts.get(o) || 0) + 1);
      const owner = owners.join(",");
      const holder = entry.holder === null || entry.holder === undefined ? "" : String(entry.holder);
      const lag = isNumber(entry.lag) ? entry.lag : null;
      if (cell.dataset.owner !== owner || !cell.dataset.colored) {
        cell.dataset.owner = owner;
        cell.dataset.colored = "1";
        if (owners.length === 0) {
          cell.style.removeProperty("background-color");
          cell.style.removeProperty("background-image");
        } else if (owners.length === 1) {
          cell.style.setProperty("background-color", colorOf(owners[0]));
          cell.style.removeProperty("background-image");
        } else {
          const step = 100 / owners.length;
          const stops = owners.map((o, i) => `${colorOf(o)} ${i * step}% ${(i + 1) * step}%`);
          cell.style.setProperty("background-image", `linear-gradient(135deg, ${stops.join(", ")})`);
        }
      }
      cell.dataset.generation = isNumber(entry.generation) ? String(entry.generation) : "";
      cell.dataset.holder = holder;
      cell.dataset.lag = lag === null ? "" : String(lag);
      const oldest = isNumber(entry.oldest_unacked_age_s) ? entry.oldest_unacked_age_s : null;
      cell.dataset.oldest = oldest === null ? "" : String(oldest);
      cell.classList.toggle("alerting", alerting.has(p));
      cell.classList.toggle("moving", owners.length === 1 && holder !== "" && holder !== owners[0]);
      cell.querySelector(".lag").textContent = lag ? (lag >= 1000 ? `${Math.round(lag / 1000)}k` : String(lag)) : "";
      const fill = lag ? Math.min(1, Math.log10(lag + 1) / Math.log10(LAG_FULL + 1)) : 0;
      // At most 40 % of the cell: the owner's color stays readable under a full bar.
      cell.querySelector(".lagbar").style.setProperty("height", `${Math.round(fill * 40)}%`);
      cell.title =
        `partition ${p}\nowner: ${owner || "none"}\nholder: ${holder || "none"}` +
        `\ngeneration: ${cell.dataset.generation || "–"}\nlag: ${lag === null ? "unknown" : lag}` +
        `\noldest unacked: ${oldest === null ? "none or unknown" : seconds(oldest)}`;
    }
    const grid = $("partition-grid");
    grid.dataset.partitions = String(partitions.length);
    grid.dataset.generation = isNumber(doc.generation) ? String(doc.generation) : "";
    $("partition-count").textContent = `(${partitions.length})`;
    renderLegend(doc, counts);
  }

  function renderLegend(doc, counts) {
    const members = new Set((doc.members || []).map((m) => String(m.id)));
    for (const owner of counts.keys()) members.add(owner);
    const items = [...members].sort().map((id) => {
      const li = el("li");
      li.dataset.member = id;
      const swatch = el("span", "swatch");
      swatch.style.setProperty("background-color", colorOf(id));
      li.append(swatch, el("span", "", `${id} (${counts.get(id) || 0})`));
      return li;
    });
    replaceChildren($("legend"), items);
  }

  // --- members ---------------------------------------------------------------------------------
  function renderMembers(doc) {
    const members = Array.isArray(doc.members) ? doc.members : [];
    const rows = members.map((m) => {
      const tr = el("tr");
      tr.dataset.member = String(m.id);
      const id = el("td", "id");
      const swatch = el("span", "swatch");
      swatch.style.setProperty("background-color", colorOf(String(m.id)));
      id.append(swatch, document.createTextNode(" " + m.id));
      id.title = m.last_message_id ? `${m.id}\nlast message: ${m.last_message_id}` : String(m.id);
      const cpu = el("td", "num cpu", isNumber(m.cpu) ? num.format(m.cpu) : "–");
      tr.classList.toggle("hot", isNumber(m.cpu) && m.cpu >= 90);
      tr.append(
        id,
        el("td", "num", isNumber(m.partitions) ? m.partitions : "–"),
        cpu,
        el("td", "num", isNumber(m.rate) ? num.format(m.rate) : "–"),
        el("td", "num", isNumber(m.project_count) ? m.project_count : "–"),
      );
      return tr;
    });
    replaceChildren($("members-body"), rows);
    $("members-empty").hidden = rows.length > 0;
    $("member-count").textContent = `(${rows.length})`;
  }

  // --- project ranking -------------------------------------------------------------------------
  function renderProjects(doc) {
    const projects = Array.isArray(doc.top_projects) ? doc.top_projects : [];
    const rows = projects.map((entry) => {
      const tr = el("tr");
      tr.dataset.project = String(entry.project);
      tr.append(
        el("td", "id", String(entry.project)),
        el("td", "num", isNumber(entry.messages) ? int.format(entry.messages) : "–"),
      );
      return tr;
    });
    replaceChildren($("projects-body"), rows);
    $("projects-empty").hidden = rows.length > 0;
  }

  // --- rebalances --------------------------------------------------------------------------------
  function countsLine(revoked, granted) {
    const chips = [];
    const ids = new Set([...Object.keys(granted || {}), ...Object.keys(revoked || {})]);
    for (const id of [...ids].sort()) {
      const plus = (granted && granted[id] ? granted[id].length : 0) || 0;
      const minus = (revoked && revoked[id] ? revoked[id].length : 0) || 0;
      const chip = el("span", "chip");
      chip.dataset.member = id;
      const swatch = el("span", "swatch");
      swatch.style.setProperty("background-color", colorOf(id));
      chip.append(swatch, document.createTextNode(id + " "));
      if (plus) chip.append(el("span", "up", `+${plus}`));
      if (plus && minus) chip.append(document.createTextNode(" "));
      if (minus) chip.append(el("span", "down", `−${minus}`));
      chips.push(chip);
    }
    return chips;
  }

  function handoffSeconds(r) {
    if (isNumber(r.handoff_seconds)) return r.handoff_seconds;
    if (isNumber(r.handoff_ms)) return r.handoff_ms / 1000;
    if (r.handoff && isNumber(r.handoff.seconds)) return r.handoff.seconds;
    return null;
  }

  function renderRebalances(doc) {
    const list = Array.isArray(doc.rebalances) ? doc.rebalances.slice(0, 20) : [];
    const items = list.map((r) => {
      const li = el("li");
      if (isNumber(r.generation)) li.dataset.generation = String(r.generation);
      li.dataset.moved = isNumber(r.moved) ? String(r.moved) : "";
      const parts = [`generation ${r.generation ?? "?"}`, `moved ${r.moved ?? "?"}`];
      if (isNumber(r.members)) parts.push(`${r.members} handler${r.members === 1 ? "" : "s"}`);
      li.append(el("span", "when", clock(r.at)), el("span", "what", parts.join(" · ")));
      const detail = el("span", "detail");
      detail.append(...countsLine(r.revoked, r.granted));
      const timing = [];
      if (isNumber(r.compute_seconds)) timing.push(`computed in ${seconds(r.compute_seconds)}`);
      const handoff = handoffSeconds(r);
      if (handoff !== null) timing.push(`handoff took ${seconds(handoff)}`);
      if (timing.length) detail.append(el("span", "", timing.join(" · ")));
      li.append(detail);
      return li;
    });
    replaceChildren($("rebalances"), items);
    $("rebalances-empty").hidden = items.length > 0;
  }

  // --- scaling (optional section) ------------------------------------------------------------------
  // The leader's `scaling` section: {enabled, scaler, active, replicas, min_replicas,
  // max_replicas, cooldown_left, decisions: [{at, decision: up|down|hold|error, rule,
  // reason, replicas_before, replicas_after, target, handlers, total_lag, error}]}, newest
  // first. Absent (older leaders, or no autoscaling wired): the panel says so.
  function scalingDecisions(scaling) {
    if (Array.isArray(scaling)) return scaling;
    for (const key of ["decisions", "history", "recent"]) {
      if (Array.isArray(scaling[key])) return scaling[key];
    }
    if (scaling.last && typeof scaling.last === "object") return [scaling.last];
    return [];
  }

  function kindOf(d) {
    if (typeof d.decision === "string") return d.decision;
    if (isNumber(d.delta)) return d.delta > 0 ? "up" : d.delta < 0 ? "down" : "hold";
    return "hold";
  }

  function renderScaling(doc) {
    const list = $("scaling");
    const scaling = doc.scaling;
    if (scaling === undefined || scaling === null || typeof scaling !== "object") {
      list.dataset.state = "absent";
      replaceChildren(list, []);
      $("scaling-summary").textContent = "";
      $("scaling-empty").textContent = "This leader reports no scaling decisions.";
      $("scaling-empty").hidden = false;
      return;
    }
    const summary = [];
    if (!Array.isArray(scaling)) {
      if (scaling.enabled === false) summary.push("autoscaling off");
      if (typeof scaling.scaler === "string") summary.push(`scaler ${scaling.scaler}`);
      if (isNumber(scaling.replicas)) summary.push(`${scaling.replicas} replicas`);
      if (isNumber(scaling.min_replicas) && isNumber(scaling.max_replicas)) {
        summary.push(`bounds ${scaling.min_replicas}–${scaling.max_replicas}`);
      }
      if (isNumber(scaling.cooldown_left) && scaling.cooldown_left > 0) {
        summary.push(`cooldown ${Math.ceil(scaling.cooldown_left)} s left`);
      }
    }
    $("scaling-summary").textContent = summary.join(" · ");
    const decisions = scalingDecisions(scaling).slice(0, 20);
    list.dataset.state = decisions.length ? "present" : "empty";
    const items = decisions.map((d) => {
      const li = el("li");
      const kind = kindOf(d);
      li.dataset.rule = d.rule ? String(d.rule) : "";
      li.dataset.decision = kind;
      const verb = { up: "scale up", down: "scale down", hold: "hold", error: "failed" }[kind] || kind;
      const before = isNumber(d.replicas_before) ? d.replicas_before : d.replicas;
      const target = isNumber(before) && isNumber(d.target) && d.target !== before ? ` ${before} → ${d.target}` : "";
      const css = kind === "up" ? "up" : kind === "down" || kind === "error" ? "down" : "hold";
      li.append(el("span", "when", clock(d.at ?? d.time ?? d.timestamp)), el("span", `what ${css}`, `${verb}${target}`));
      if (d.rule) li.append(el("span", "muted", ` [${d.rule}]`));
      if (d.reason) li.append(el("span", "detail", d.reason));
      if (d.error) li.append(el("span", "detail down", `error: ${d.error}`));
      return li;
    });
    replaceChildren(list, items);
    $("scaling-empty").textContent = "No scaling decision yet.";
    $("scaling-empty").hidden = items.length > 0;
  }

  // --- landing table (optional section) ------------------------------------------------------------
  // The leader's `table` section: {enabled, active, location, files, small_files, bytes, rows,
  // log_files, log_bytes, last_compaction: {at, days, files_removed, files_added},
  // last_vacuum: {at, files_removed}, last_error: {at, error} | null}. Absent (older
  // leaders) or not enabled (no landing zone given to the leader): the panel says so.
  function size(bytes) {
    if (!isNumber(bytes)) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let value = bytes;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return unit === 0 ? `${int.format(value)} B` : `${num.format(value)} ${units[unit]}`;
  }

  function renderTable(doc) {
    const panel = $("table-panel");
    const table = doc.table;
    const note = $("table-note");
    const error = $("table-error");
    if (!table || typeof table !== "object" || !table.enabled) {
      panel.dataset.state = table && typeof table === "object" ? "off" : "absent";
      note.textContent = panel.dataset.state === "off"
        ? "This leader keeps no landing table up (no SHOAL_LEADER_DATA_DIR, or broadcast mode)."
        : "This leader reports no landing table.";
      note.hidden = false;
      error.hidden = true;
      $("table-location").textContent = "";
      return;
    }
    const failing = table.last_error && typeof table.last_error === "object";
    panel.dataset.state = failing ? "failing" : "live";
    $("table-location").textContent = table.location ? `(${table.location})` : "";
    const files = $("table-files");
    const small = isNumber(table.small_files) && table.small_files ? ` (${int.format(table.small_files)} small)` : "";
    files.textContent = isNumber(table.files) ? `${int.format(table.files)}${small}` : "not read yet";
    files.dataset.files = isNumber(table.files) ? String(table.files) : "";
    files.dataset.small = isNumber(table.small_files) ? String(table.small_files) : "";
    $("table-rows").textContent = isNumber(table.rows) ? int.format(table.rows) : "–";
    $("table-bytes").textContent = size(table.bytes);
    const logEl = $("table-log");
    logEl.textContent = isNumber(table.log_files) ? `${int.format(table.log_files)} files · ${size(table.log_bytes)}` : "–";
    logEl.dataset.logFiles = isNumber(table.log_files) ? String(table.log_files) : "";
    logEl.dataset.logBytes = isNumber(table.log_bytes) ? String(table.log_bytes) : "";
    const compaction = table.last_compaction;
    const compactionEl = $("table-compaction");
    compactionEl.textContent = compaction
      ? `${clock(compaction.at)} · ${compaction.files_removed} → ${compaction.files_added} files`
      : "none yet";
    compactionEl.dataset.at = compaction && isNumber(compaction.at) ? String(compaction.at) : "";
    compactionEl.title = compaction && Array.isArray(compaction.days) ? `days: ${compaction.days.join(", ")}` : "";
    const vacuum = table.last_vacuum;
    const vacuumEl = $("table-vacuum");
    vacuumEl.textContent = vacuum ? `${clock(vacuum.at)} · ${vacuum.files_removed} deleted` : "none yet";
    vacuumEl.dataset.at = vacuum && isNumber(vacuum.at) ? String(vacuum.at) : "";
    error.hidden = !failing;
    error.textContent = failing ? `The last upkeep round failed, ${clock(table.last_error.at)}: ${table.last_error.error}` : "";
    note.hidden = true;
  }

  // --- one document ------------------------------------------------------------------------------
  function render(doc) {
    meet([
      ...(doc.members || []).map((m) => String(m.id)),
      ...(doc.partitions || []).flatMap(ownersOf),
    ]);
    renderHeader(doc);
    renderGrid(doc);
    renderMembers(doc);
    renderProjects(doc);
    renderRebalances(doc);
    renderScaling(doc);
    renderTable(doc);
    lastUpdate = Date.now();
    updates += 1;
    document.body.dataset.state = "live";
    document.body.dataset.updates = String(updates);
    const updated = $("updated-at");
    updated.dataset.updated = String(lastUpdate);
    updated.textContent = `updated ${new Date(lastUpdate).toLocaleTimeString("en-GB", { hour12: false })}`;
  }

  function setConnection(state, text) {
    const node = $("connection");
    node.dataset.state = state;
    node.textContent = text;
  }

  function onStatus(data) {
    let doc;
    try {
      doc = JSON.parse(data);
    } catch (err) {
      setConnection("error", "bad status document");
      return;
    }
    render(doc);
    setConnection("live", "live");
  }

  async function poll() {
    try {
      const response = await fetch("status", { cache: "no-store" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      onStatus(await response.text());
    } catch (err) {
      setConnection("error", `status unreachable (${err.message})`);
    }
  }

  function startPolling() {
    if (pollTimer === null) pollTimer = setInterval(poll, 2000);
  }
  function stopPolling() {
    if (pollTimer !== null) clearInterval(pollTimer);
    pollTimer = null;
  }

  function connect() {
    if (!("EventSource" in window)) {
      startPolling();
      return;
    }
    source = new EventSource("events");
    source.addEventListener("status", (event) => {
      stopPolling();
      onStatus(event.data);
    });
    source.addEventListener("unavailable", () => setConnection("unavailable", "status unavailable; retrying"));
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        // Refused (e.g. 503: too many streams): poll meanwhile, try the stream again later.
        setConnection("reconnecting", "stream refused; polling");
        startPolling();
        setTimeout(connect, 10000);
      } else {
        setConnection("reconnecting", "reconnecting…");
      }
    });
  }

  setInterval(() => {
    if (lastUpdate && Date.now() - lastUpdate > STALE_MS) {
      setConnection("reconnecting", `no update for ${Math.round((Date.now() - lastUpdate) / 1000)} s`);
      document.body.dataset.state = "stale";
    }
  }, 1000);

  poll();
  connect();
})();
