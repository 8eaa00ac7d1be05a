// runstore console: live records over server-sent events, expand/collapse, the namespace picker,
// copying a payload, and times in UTC or local time.
// Rows are built with createElement and textContent only: a payload is text, never markup.
"use strict";

(function () {
  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A link stays in the namespace the page shows (the server's url() does the same).
  function inNamespace() {
    var namespace = document.body.dataset.namespace;
    return namespace && namespace !== "default" ? "&namespace=" + encodeURIComponent(namespace) : "";
  }

  function recordRow(record, showRun) {
    var row = el("li", "record");
    row.dataset.position = String(record.position);
    row.dataset.type = record.type;
    row.id = "record-" + record.position;
    var head = el("div", "record-head");
    head.appendChild(el("span", "position", "#" + record.position));
    head.appendChild(el("span", "type", record.type));
    var time = el("span", "time");
    time.appendChild(moment(record.timestamp));
    head.appendChild(time);
    if (showRun) {
      var link = el("a", "run-link", record.run_id);
      link.href = "/run?id=" + encodeURIComponent(record.run_id) + inNamespace();
      head.appendChild(link);
    }
    head.appendChild(el("span", "key", "key " + record.event_key));
    if (record.turn_id) head.appendChild(el("span", "turn", "turn " + record.turn_id));
    head.appendChild(el("span", "size", record.payload.size + " B"));
    var copy = el("button", "copy", "copy");
    copy.type = "button";
    head.appendChild(copy);
    var raw = el("a", "raw", "raw");
    raw.href = "/run/payload?id=" + encodeURIComponent(record.run_id) + "&record=" +
      encodeURIComponent(record.id) + inNamespace();
    raw.setAttribute("download", "");
    head.appendChild(raw);
    row.appendChild(head);
    var pre = el("pre", null, record.payload.text);
    if (record.payload.collapsed) {
      var details = el("details", "payload");
      details.appendChild(el("summary", null, "payload (" + record.payload.size + " bytes" +
        (record.payload.cut ? ", first part shown" : "") + ")"));
      details.appendChild(pre);
      row.appendChild(details);
    } else {
      pre.className = "payload";
      row.appendChild(pre);
    }
    row.classList.add("new");
    return row;
  }

  function follow(list) {
    var state = document.getElementById("live-state");
    var showRun = list.dataset.live.indexOf("/session/") === 0;
    var newest = 0;
    list.querySelectorAll("li.record").forEach(function (row) {
      newest = Math.max(newest, Number(row.dataset.position));
    });
    var source = new EventSource(list.dataset.live);
    function say(text) { if (state) state.textContent = text; }
    source.addEventListener("open", function () { say("live"); });
    var onlyType = list.dataset.type || "";
    source.addEventListener("record", function (event) {
      var record = JSON.parse(event.data);
      if (record.position <= newest) return;  // already shown (a resumed stream never repeats)
      newest = record.position;
      countTo(newest);
      if (onlyType && record.type !== onlyType) return;  // the page shows one type
      list.insertBefore(recordRow(record, showRun), list.firstChild);
    });
    source.addEventListener("end", function () {
      say("run ended (reload for its status)");
      source.close();
    });
    source.addEventListener("failure", function (event) {
      say("live view stopped: " + JSON.parse(event.data).error);
      source.close();
    });
    source.addEventListener("error", function () { say("reconnecting…"); });
  }

  // The pagers' "records F–L of N" follow the live rows: the page now ends at the newest.
  function countTo(newest) {
    document.querySelectorAll(".pager .range").forEach(function (range) {
      var first = Number(range.dataset.first || "1");
      range.textContent = "records " + first + "–" + newest + " of " + newest;
    });
  }

  // A <time datetime> shows UTC as the server wrote it, or local time when the reader asked.
  var LOCAL_KEY = "runstore.console.local-time";
  function localWanted() {
    try { return window.localStorage.getItem(LOCAL_KEY) === "1"; } catch (e) { return false; }
  }
  function pad(n, width) { var s = String(n); while (s.length < (width || 2)) s = "0" + s; return s; }
  function showTime(node) {
    var utc = node.dataset.utc || node.textContent;
    node.dataset.utc = utc;
    if (!localWanted()) { node.textContent = utc; node.title = ""; return; }
    var at = new Date(node.getAttribute("datetime"));
    if (isNaN(at.getTime())) return;
    var offset = -at.getTimezoneOffset();
    var sign = offset >= 0 ? "+" : "-";
    offset = Math.abs(offset);
    node.textContent = at.getFullYear() + "-" + pad(at.getMonth() + 1) + "-" + pad(at.getDate()) +
      " " + pad(at.getHours()) + ":" + pad(at.getMinutes()) + ":" + pad(at.getSeconds()) + "." +
      pad(at.getMilliseconds(), 3) + " " + sign + pad(Math.floor(offset / 60)) + ":" + pad(offset % 60);
    node.title = utc;
  }
  function moment(text) {
    var node = el("time", null, text);
    node.setAttribute("datetime", text.replace(" ", "T"));
    showTime(node);
    return node;
  }
  function timeToggle(button) {
    function label() {
      button.textContent = localWanted() ? "times: local (show UTC)" : "times: UTC (show local)";
    }
    label();
    button.addEventListener("click", function () {
      try { window.localStorage.setItem(LOCAL_KEY, localWanted() ? "0" : "1"); } catch (e) { return; }
      label();
      document.querySelectorAll("time[datetime]").forEach(showTime);
    });
  }

  // Copies the payload as the page shows it (formatted); "raw" downloads its bytes.
  function copyPayload(event) {
    var button = event.target;
    if (!(button instanceof HTMLElement) || !button.classList.contains("copy")) return;
    var row = button.closest("li.record");
    var pre = row ? row.querySelector("pre") : null;
    if (!pre || !navigator.clipboard) { button.textContent = "copy unavailable"; return; }
    navigator.clipboard.writeText(pre.textContent).then(
      function () { button.textContent = "copied"; },
      function () { button.textContent = "copy refused"; }
    );
  }

  function expandAll(button) {
    button.addEventListener("click", function () {
      var open = button.dataset.open !== "1";
      document.querySelectorAll("details.payload").forEach(function (d) { d.open = open; });
      button.dataset.open = open ? "1" : "0";
      button.textContent = open ? "collapse payloads" : "expand payloads";
    });
  }

  // The namespace picker shows the chosen namespace's sessions as soon as it changes.
  function pickOnChange(form) {
    var select = form.querySelector("select");
    if (select) select.addEventListener("change", function () { form.submit(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(follow);
    document.querySelectorAll("#namespace-picker").forEach(pickOnChange);
    document.querySelectorAll("button.expand-all").forEach(expandAll);
    document.querySelectorAll("button.time-toggle").forEach(timeToggle);
    document.querySelectorAll("time[datetime]").forEach(showTime);
    document.addEventListener("click", copyPayload);
  });
})();
