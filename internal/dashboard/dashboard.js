// pinlab's live dashboard: reads the board's snapshots from a stream of
// server-sent events and shows them; on a lab, calls the control API's
// verbs. The token comes from the URL's fragment (#token=...), which never
// leaves the browser, and goes with every request as a bearer token.
(function () {
  "use strict";

  const stream = document.body.dataset.stream;
  const panelsPath = document.body.dataset.panels;
  const status = document.getElementById("status");
  const KEY = "pinlab-token";

  // What the page has shown, for the browser tests.
  // shown: per event ("panel: text"), when it happened and when the page
  // first showed it (Unix ms); podsShown: per panel, when the page first
  // showed each number of pods.
  const live = window.pinlabLive = {state: "connecting", snapshots: 0, seq: 0, done: false, pods: {}, steps: {}, verbs: [], shown: {}, podsShown: {}};

  function takeToken() {
    const m = /(?:^#|&)token=([A-Za-z0-9_-]+)/.exec(location.hash);
    if (m) {
      try { sessionStorage.setItem(KEY, m[1]); } catch (e) { /* storage off: the token lives in this page only */ }
      history.replaceState(null, "", location.pathname + location.search);
      return m[1];
    }
    try { return sessionStorage.getItem(KEY) || ""; } catch (e) { return ""; }
  }
  const token = takeToken();

  function setStatus(text, cls) {
    status.textContent = text;
    status.className = cls || "";
    live.state = text;
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function setText(e, text) { if (e && e.textContent !== text) e.textContent = text; }

  const charts = {};
  function drawChart(spec) {
    const h = charts[spec.id];
    if (h) { h.update(spec); return; }
    const fig = document.getElementById(spec.id);
    if (fig) charts[spec.id] = pinlabChart.draw(fig, spec);
  }

  // fillRows replaces a table body's rows.
  function fillRows(tbody, items, cells) {
    const frag = document.createDocumentFragment();
    for (const it of items) {
      const tr = el("tr");
      cells(it).forEach((c, k) => {
        const td = el(k === 0 ? "th" : "td", c.text, c.num ? "num" : "");
        if (k === 0) td.scope = "row";
        tr.appendChild(td);
      });
      frag.appendChild(tr);
    }
    tbody.textContent = "";
    tbody.appendChild(frag);
  }

  function renderPanel(i, p) {
    const sec = document.getElementById("panel-" + i);
    if (!sec) return;
    const field = name => sec.querySelector('[data-field="' + name + '"]');
    setText(field("state"), p.state);
    setText(field("calls"), String(p.calls));
    setText(field("failed"), String(p.failed));
    const prog = sec.querySelector("progress");
    if (prog) {
      prog.value = p.elapsed_s;
      setText(field("elapsed"), p.elapsed_s.toFixed(1) + " s of " + p.duration_s + " s");
    } else {
      setText(field("elapsed"), "up " + Math.floor(p.elapsed_s) + " s");
    }
    sec.querySelectorAll("ol.steps li").forEach((li, k) => {
      const done = !!(p.steps[k] && p.steps[k].done);
      li.classList.toggle("done", done);
      li.title = done ? "done" : "to come";
    });
    drawChart(p.rates);
    drawChart(p.history);
    fillRows(sec.querySelector("table.pods tbody"), p.pods, pod => [
      {text: pod.label}, {text: pod.name}, {text: pod.ip || "-"}, {text: pod.phase}, {text: String(pod.rate), num: true}, {text: String(pod.calls), num: true},
    ]);
    fillRows(sec.querySelector("table.clients tbody"), p.clients, c => [
      {text: c.name}, {text: String(c.open), num: true}, {text: String(c.opened), num: true},
    ]);
    live.pods[p.name] = p.pods.length;
    const ps = live.podsShown[p.name] = live.podsShown[p.name] || {};
    if (!(p.pods.length in ps)) ps[p.pods.length] = Date.now();
    live.steps[p.name] = p.steps.filter(s => s.done).length;
  }

  function renderEvents(events) {
    const ol = document.getElementById("events");
    const frag = document.createDocumentFragment();
    for (let k = events.length - 1; k >= 0; k--) {
      const e = events[k];
      const li = el("li");
      li.title = new Date(e.time_ms).toLocaleTimeString();
      const key = e.panel + ": " + e.text;
      if (!live.shown[key]) live.shown[key] = {at: e.time_ms, shown: Date.now()};
      li.appendChild(el("span", e.at_s.toFixed(1) + " s ", "at"));
      li.appendChild(document.createTextNode(e.panel + ": " + e.text));
      frag.appendChild(li);
    }
    ol.textContent = "";
    ol.appendChild(frag);
  }

  // The objects' tables keep their rows (and the buttons and inputs in
  // them) from one snapshot to the next, keyed by namespace and name.
  const tables = {};
  function renderObjects(list) {
    const box = document.getElementById("tables");
    if (!box) return;
    for (const t of list) {
      let tab = tables[t.kind];
      if (!tab) {
        const table = el("table", undefined, "list objects");
        table.dataset.kind = t.kind;
        table.appendChild(el("caption", t.kind + "s"));
        const head = table.createTHead().insertRow();
        for (const h of t.header) { const th = el("th", h); th.scope = "col"; head.appendChild(th); }
        if (actions[t.kind]) { const th = el("th", "actions"); th.scope = "col"; head.appendChild(th); }
        const wrap = el("div", undefined, "scroll");
        wrap.appendChild(table);
        box.appendChild(wrap);
        tab = tables[t.kind] = {body: table.createTBody(), rows: {}};
      }
      const seen = {};
      t.rows.forEach((cells, k) => {
        const key = cells[0] + "/" + cells[1];
        seen[key] = true;
        let tr = tab.rows[key];
        if (!tr) {
          tr = tab.rows[key] = el("tr");
          tr.dataset.key = key;
          cells.forEach(() => tr.appendChild(el("td")));
          if (actions[t.kind]) tr.appendChild(actions[t.kind](cells));
        }
        cells.forEach((c, j) => setText(tr.children[j], c));
        if (tab.body.children[k] !== tr) tab.body.insertBefore(tr, tab.body.children[k] || null);
      });
      for (const key of Object.keys(tab.rows)) {
        if (!seen[key]) { tab.rows[key].remove(); delete tab.rows[key]; }
      }
    }
  }

  function button(text, label, onClick) {
    const b = el("button", text);
    b.type = "button";
    b.setAttribute("aria-label", label);
    b.addEventListener("click", onClick);
    return b;
  }

  // actions are the control verbs per kind: a cell of buttons for a row.
  const actions = {
    Deployment: cells => scaleCell("Deployment", cells),
    StatefulSet: cells => scaleCell("StatefulSet", cells),
    Pod: cells => {
      const td = el("td");
      const [ns, name] = cells;
      td.appendChild(button("delete", "delete pod " + ns + "/" + name, () => verb("/v1/delete", {namespace: ns, name: name}, "delete pod " + name)));
      td.appendChild(document.createTextNode(" "));
      td.appendChild(button("not ready", "make pod " + ns + "/" + name + " not ready", () => verb("/v1/ready", {namespace: ns, name: name, ready: false}, "unready pod " + name)));
      td.appendChild(document.createTextNode(" "));
      td.appendChild(button("ready", "give pod " + ns + "/" + name + " its readiness back", () => verb("/v1/ready", {namespace: ns, name: name, ready: true}, "ready pod " + name)));
      return td;
    },
  };

  function scaleCell(kind, cells) {
    const [ns, name, ready] = cells;
    const td = el("td");
    const input = el("input");
    input.type = "number";
    input.min = "0";
    input.max = "1000";
    input.value = (ready.split("/")[1] || "1");
    input.setAttribute("aria-label", "replicas of " + kind + " " + ns + "/" + name);
    td.appendChild(input);
    td.appendChild(document.createTextNode(" "));
    td.appendChild(button("scale", "scale " + kind + " " + ns + "/" + name, () =>
      verb("/v1/scale", {kind: kind, namespace: ns, name: name, replicas: Number(input.value)}, "scale " + kind + " " + name + " to " + input.value)));
    return td;
  }

  // verb calls the control API: same origin, with the token, as JSON.
  async function verb(path, body, what) {
    const out = document.getElementById("verb-result");
    out.textContent = what + ": sending";
    let status = 0, msg = "";
    try {
      const resp = await fetch(path, {
        method: "POST", cache: "no-store", body: JSON.stringify(body),
        headers: {"Authorization": "Bearer " + token, "Content-Type": "application/json"},
      });
      status = resp.status;
      msg = resp.ok ? "done" : resp.statusText;
      try { const j = await resp.json(); if (j.error) msg = j.error; } catch (e) { /* not JSON */ }
    } catch (e) {
      msg = "no answer: " + e.message;
    }
    out.textContent = what + ": " + (status ? status + " " : "") + msg;
    live.verbs.push({path: path, status: status, message: msg});
  }

  function render(s) {
    if (s.title) {
      setText(document.getElementById("title"), s.title);
      if (document.title !== s.title) document.title = s.title;
    }
    (s.panels || []).forEach((p, i) => renderPanel(i, p));
    renderEvents(s.events || []);
    if (s.lab) {
      document.getElementById("objects").hidden = false;
      renderObjects(s.objects || []);
    }
    if (s.final && s.final.length) {
      const box = document.getElementById("final");
      box.textContent = "";
      for (const line of s.final) box.appendChild(el("p", line));
      box.hidden = false;
    }
    live.seq = s.seq;
    live.snapshots++;
    live.updated = Date.now();
    live.done = !!s.done;
  }

  // read parses the event stream and renders each snapshot; it returns
  // true once the board said it is done.
  async function read(resp) {
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return false;
      buf += dec.decode(value, {stream: true});
      let k;
      while ((k = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, k);
        buf = buf.slice(k + 2);
        let name = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) name = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (data && data !== "{}") render(JSON.parse(data));
        if (name === "end") return true;
      }
    }
  }

  async function connect() {
    if (!token) {
      setStatus("No token: open the address pinlab printed, with its #token=... part.");
      return;
    }
    let ended = false;
    try {
      const auth = {headers: {"Authorization": "Bearer " + token}, cache: "no-store"};
      if (!document.querySelector("#panels section")) {
        const p = await fetch(panelsPath, auth);
        if (p.status === 401) {
          setStatus("The token was refused: this page's address is from another run or lab.");
          return;
        }
        if (!p.ok) throw new Error(p.status + " " + p.statusText);
        // The server's own markup (html/template), no script in it.
        document.getElementById("panels").innerHTML = await p.text();
      }
      const resp = await fetch(stream, auth);
      if (resp.status === 401) {
        setStatus("The token was refused: this page's address is from another run or lab.");
        return;
      }
      if (!resp.ok) throw new Error(resp.status + " " + resp.statusText);
      setStatus("live", "live");
      ended = await read(resp);
    } catch (e) {
      /* the server went away or the network failed: try again below */
    }
    if (ended || live.done) {
      setStatus(!document.getElementById("objects").hidden ? "The lab has stopped." : "The run is over; pinlab no longer serves this page (its report is in the terminal).");
      return;
    }
    setStatus("disconnected; reconnecting");
    setTimeout(connect, 1000);
  }

  connect();
})();
