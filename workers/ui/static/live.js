// Live rows for lane and thread pages: server-sent events from the UI's own /live endpoints.
// The server renders every row with the page's escaped templates; this script only places them.
(function () {
  "use strict";
  var body = document.querySelector("[data-live]");
  if (!body || !window.EventSource) { return; }
  var status = document.getElementById("live-status");
  var url = body.getAttribute("data-live") + "&after=" + encodeURIComponent(body.getAttribute("data-after"));
  var source = new EventSource(url);
  function say(text) { if (status) { status.textContent = text; } }
  source.addEventListener("open", function () { say("live: connected"); });
  source.addEventListener("error", function () { say("live: reconnecting…"); });
  source.addEventListener("problem", function (event) {
    say("live: " + JSON.parse(event.data).message);
  });
  // A thread's log verdict: the banner the server rendered, and the records it marks
  // (their notes are placed as text, never as markup).
  function verdict(data) {
    var box = document.getElementById("log-integrity");
    if (!box || data.integrity === undefined) { return; }
    box.innerHTML = data.integrity;
    box.className = "integrity " + data.state;
    box.setAttribute("data-integrity", data.state);
    if (data.state === "whole") { box.removeAttribute("role"); } else { box.setAttribute("role", "alert"); }
    var records = document.querySelectorAll("#call-rows .record");
    for (var i = 0; i < records.length; i++) {
      var id = records[i].getAttribute("data-entry");
      if (!Object.prototype.hasOwnProperty.call(data.marks, id) || records[i].querySelector(".flag")) { continue; }
      var flag = document.createElement("div");
      flag.className = "flag";
      flag.setAttribute("data-flag", id);
      flag.textContent = "not trusted: " + data.marks[id];
      records[i].insertBefore(flag, records[i].firstChild);
      records[i].classList.add("flagged");
      var row = records[i].closest("tr");
      if (row) { row.classList.add("flagged"); }
    }
  }
  source.addEventListener("integrity", function (event) {
    verdict(JSON.parse(event.data));
    body.setAttribute("data-after", event.lastEventId);
    say("live: the log changed " + new Date().toISOString());
  });
  source.addEventListener(body.getAttribute("data-event"), function (event) {
    var data = JSON.parse(event.data);
    body.insertAdjacentHTML("afterbegin", data.rows);
    verdict(data);
    if (data.document !== undefined) {
      var doc = document.getElementById("document-body");
      if (doc) { doc.innerHTML = data.document; }
    }
    var figure = document.querySelector(body.getAttribute("data-event") === "signals" ?
      "[data-figure=signals]" : "[data-figure=deliveries]");
    if (figure && data.length !== undefined) { figure.textContent = String(data.length); }
    body.setAttribute("data-after", event.lastEventId);
    say("live: updated " + new Date().toISOString());
  });
}());
