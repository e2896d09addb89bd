// benchledger dashboard: refresh the numbers of the page from its JSON API.
// No framework, no build: values go in with textContent and SVG attributes only,
// so nothing the database holds is ever parsed as markup.
(function () {
  "use strict";
  var body = document.body;
  var api = body.getAttribute("data-api");
  var page = body.getAttribute("data-page");
  var every = parseInt(body.getAttribute("data-poll-ms") || "2000", 10);
  var live = document.getElementById("live");

  function get(obj, path) {
    return path.split(".").reduce(function (o, k) { return o == null ? undefined : o[k]; }, obj);
  }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  var formats = {
    number: function (v) {
      if (v == null) return "–";
      return Number.isInteger(v) ? v.toLocaleString("en-US")
        : v.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
    },
    percent: function (v) { return v == null ? "–" : (100 * v).toFixed(1) + "%"; },
    seconds: function (v) { return v == null ? "–" : v.toFixed(2) + " s"; },
    when: function (v) {
      if (v == null) return "–";
      var d = new Date(v * 1000);
      return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
        pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()) + " UTC";
    },
    duration: function (v) {
      if (v == null || !isFinite(v)) return "–";
      var sign = v < 0 ? "-" : "", s = Math.round(Math.abs(v));
      if (s < 60) return sign + s + "s";
      var m = Math.floor(s / 60); s = s % 60;
      if (m < 60) return sign + m + "m " + pad(s) + "s";
      var h = Math.floor(m / 60); m = m % 60;
      if (h < 48) return sign + h + "h " + pad(m) + "m";
      return sign + Math.floor(h / 24) + "d " + (h % 24) + "h";
    }
  };
  function show(el, value) {
    var f = formats[el.getAttribute("data-format")];
    var text = f ? f(value) : (value == null ? "–" : String(value));
    if (el.textContent !== text) el.textContent = text;
  }
  function bind(root, data) {
    root.querySelectorAll("[data-bind]").forEach(function (el) {
      show(el, get(data, el.getAttribute("data-bind")));
    });
  }
  function segments(svg, parts, total) {
    var x = 0;
    parts.forEach(function (part) {
      var rect = svg.querySelector('[data-seg="' + part[0] + '"]');
      var w = total > 0 ? 1000 * part[1] / total : 0;
      if (rect) { rect.setAttribute("x", x.toFixed(2)); rect.setAttribute("width", w.toFixed(2)); }
      x += w;
    });
  }
  function progress(root, status) {
    var c = status.counts;
    root.querySelectorAll("svg[data-progress]").forEach(function (svg) {
      segments(svg, [["succeeded", c.succeeded], ["failed", c.failed], ["leased", c.leased],
        ["waiting", c.pending + c.retry_wait]], status.work_count);
      svg.setAttribute("aria-label", c.succeeded + " of " + status.work_count + " succeeded");
    });
  }
  function cell(row, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    row.appendChild(td);
    return td;
  }
  function table(id, rows, empty, columns, render) {
    var tbody = document.getElementById(id);
    if (!tbody) return;
    var fresh = document.createDocumentFragment();
    if (!rows.length) {
      var tr = document.createElement("tr"); tr.className = "none";
      cell(tr, empty).setAttribute("colspan", columns);
      fresh.appendChild(tr);
    }
    rows.forEach(function (item) {
      var tr = document.createElement("tr"); render(tr, item); fresh.appendChild(tr);
    });
    tbody.replaceChildren(fresh);
  }
  function chart(points) {
    var svg = document.getElementById("chart");
    if (!svg) return;
    var peak = 1;
    points.forEach(function (p) { if (p.count > peak) peak = p.count; });
    var rects = svg.querySelectorAll("rect");
    points.forEach(function (p, i) {
      var r = rects[i];
      if (!r) return;
      var h = 110 * p.count / peak;
      r.setAttribute("y", (115 - h).toFixed(2));
      r.setAttribute("height", h.toFixed(2));
      var title = r.querySelector("title");
      if (title) title.textContent = formats.when(p.minute) + ": " + p.count;
    });
    var label = document.getElementById("chart-peak");
    if (label) label.textContent = formats.number(peak);
  }
  var reloadedSections = null;
  function refreshSections(keys) {
    // A section whose content is more than numbers (health reasons, the report)
    // is taken from a fresh render of this page when its state changes.
    if (reloadedSections === null) { reloadedSections = keys; return; }
    var changed = Object.keys(keys).filter(function (id) { return reloadedSections[id] !== keys[id]; });
    if (!changed.length) return;
    changed.forEach(function (id) { reloadedSections[id] = keys[id]; });
    fetch(window.location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        changed.forEach(function (id) {
          var mine = document.getElementById(id), theirs = doc.getElementById(id);
          if (mine && theirs) mine.replaceWith(document.importNode(theirs, true));
        });
      });
  }
  function campaign(data) {
    var status = data.status;
    data.waiting = status.counts.pending + status.counts.retry_wait;
    data.percent_done = status.counts.succeeded / status.work_count;
    bind(document, data);
    progress(document, status);
    chart(data.completions_per_minute);
    table("leases", data.leases, "no live leases", 5, function (tr, l) {
      cell(tr, l.worker); cell(tr, l.target_locale); cell(tr, l.suite_case_key);
      cell(tr, l.attempt + "/" + l.max_attempts, "num"); cell(tr, formats.duration(l.expires_in));
    });
    table("retries", data.retries, "nothing waiting to retry", 5, function (tr, r) {
      cell(tr, r.target_locale); cell(tr, r.suite_case_key);
      cell(tr, r.attempts + "/" + r.max_attempts, "num"); cell(tr, formats.duration(r.due_in));
      var code = document.createElement("code");
      code.textContent = r.error_code || "–";
      cell(tr, "").appendChild(code);
    });
    table("failures", data.failures, "no failures", 4, function (tr, g) {
      var code = document.createElement("code");
      code.textContent = g.code;
      cell(tr, "").appendChild(code);
      cell(tr, formats.number(g.count), "num");
      cell(tr, Object.keys(g.by_status).map(function (k) { return k + " " + g.by_status[k]; }).join(", "));
      var td = cell(tr, "");
      g.examples.forEach(function (e) {
        var span = document.createElement("span"); span.className = "example";
        span.textContent = e.target_locale + " · " + e.suite_case_key + " · " + e.attempts;
        td.appendChild(span);
      });
    });
    var badge = document.querySelector("[data-health-badge]");
    if (badge && data.health) {
      badge.textContent = data.health.status;
      badge.className = "badge " + data.health.status;
      badge.title = data.health.reason_codes.join("; ");
    }
    refreshSections({
      flow: data.flow ? [data.flow.state, data.flow.capped_by.join(","), data.flow.live_leases,
        data.flow.claims_last_minute].join("|") : "",
      "failed-advice-box": String(status.counts.failed),
      "rate-window": String(data.progress.over_life),
      health: data.health ? [data.health.status, data.health.reasons.join(","),
        data.health.verified_at, data.health.verified_ok, data.health.verified_current,
        data.health.changes_since_verified].join("|") : "checking",
      report: data.report.state
    });
  }
  function campaigns(data) {
    data.campaigns.forEach(function (item) {
      if (!item.counts) return;
      var row = document.querySelector('tr[data-campaign="' + CSS.escape(item.campaign_id) + '"]');
      if (!row) return;
      item.waiting = item.counts.pending + item.counts.retry_wait;
      bind(row, item);
      progress(row, item);
      var badge = row.querySelector("[data-health-badge]");
      if (badge && item.health) {
        badge.textContent = item.health.status;
        badge.className = "badge " + item.health.status;
        var codes = row.querySelector("[data-health-codes]");
        if (codes) {
          var frag = document.createDocumentFragment();
          item.health.reason_codes.forEach(function (code) {
            var c = document.createElement("code");
            c.textContent = code;
            frag.appendChild(c); frag.appendChild(document.createTextNode(" "));
          });
          codes.replaceChildren(frag);
        }
      }
    });
  }
  function study(data) {
    bind(document, data);
    data.budget.forEach(function (bar) {
      var box = document.querySelector('[data-budget="' + CSS.escape(bar.dimension) + '"]');
      if (!box) return;
      ["charged", "reserved", "remaining", "limit"].forEach(function (k) {
        var el = box.querySelector('[data-b="' + k + '"]');
        if (el) { var t = formats.number(bar[k]); if (el.textContent !== t) el.textContent = t; }
      });
      segments(box.querySelector("svg"), [["charged", bar.charged], ["reserved", bar.reserved],
        ["remaining", bar.remaining]], bar.limit || 1);
    });
    var states = document.getElementById("run-states");
    if (states) {
      var keys = Object.keys(data.run_states);
      states.textContent = keys.length ? keys.map(function (k) { return k + " " + data.run_states[k]; }).join(", ") : "none";
    }
  }
  function results(data) {
    // The summary section is re-rendered by the server when a newer reading exists.
    refreshSections({ summary: data.checking ? "checking" : String(data.at) });
  }
  var pickA = document.getElementById("pick-a");
  if (pickA) {
    // Choosing A lists the campaigns of A's suite for B (a new page: B is cleared).
    pickA.addEventListener("change", function () {
      var b = document.getElementById("pick-b");
      if (b) b.value = "";
      pickA.form.submit();
    });
  }
  var handlers = { campaign: campaign, campaigns: campaigns, study: study, results: results };
  var handler = handlers[page];
  if (!api || !handler) return;
  function tick() {
    fetch(api, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.json(); })
      .then(function (data) {
        handler(data);
        if (live) { live.setAttribute("data-state", "ok"); live.textContent = "live " + formats.when(Date.now() / 1000).slice(11, 19); }
        body.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { if (live) { live.setAttribute("data-state", "error"); live.textContent = "offline"; } })
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
