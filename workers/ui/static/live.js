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
  source.addEventListener(body.getAttribute("data-event"), function (event) {
    var data = JSON.parse(event.data);
    body.insertAdjacentHTML("afterbegin", data.rows);
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
