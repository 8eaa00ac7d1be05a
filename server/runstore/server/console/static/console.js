// runstore console: live records over server-sent events, expand/collapse, the namespace picker.
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
    var head = el("div", "record-head");
    head.appendChild(el("span", "position", "#" + record.position));
    head.appendChild(el("span", "type", record.type));
    head.appendChild(el("span", "time", record.timestamp));
    if (showRun) {
      var link = el("a", "run-link", record.run_id);
      link.href = "/run?id=" + encodeURIComponent(record.run_id) + inNamespace();
      head.appendChild(link);
    }
    head.appendChild(el("span", "key", "key " + record.event_key));
    if (record.turn_id) head.appendChild(el("span", "turn", "turn " + record.turn_id));
    head.appendChild(el("span", "size", record.payload.size + " B"));
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
    source.addEventListener("record", function (event) {
      var record = JSON.parse(event.data);
      if (record.position <= newest) return;  // already shown (a resumed stream never repeats)
      newest = record.position;
      list.insertBefore(recordRow(record, showRun), list.firstChild);
    });
    source.addEventListener("end", function () { say("run ended"); source.close(); });
    source.addEventListener("failure", function (event) {
      say("live view stopped: " + JSON.parse(event.data).error);
      source.close();
    });
    source.addEventListener("error", function () { say("reconnecting…"); });
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
  });
})();
