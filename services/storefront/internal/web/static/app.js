// The storefront's only script: send the order form as JSON, then poll the order's
// journey until it is done, and refresh the stock as it changes. No build step.
"use strict";

const form = document.getElementById("order-form");
const message = document.getElementById("order-message");
const journey = document.getElementById("journey");
let polling = null;
let watching = 0; // the number of the latest watch(): only its ticks go on

// The key of the form stays the same while its contents do: the same form sent twice
// (a double click, a click after the answer, a retry) is the same order, which ordering
// replays. Once an order is placed the storefront gives the key of the next one, used as
// soon as the form is sent with other contents.
let sentWith = null; // the contents the current key was sent with
let nextKey = null;

form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = {
    customer_email: form.customer_email.value,
    book_id: form.book_id.value,
    quantity: Number(form.quantity.value),
  };
  const contents = JSON.stringify(body);
  if (sentWith !== null && sentWith !== contents && nextKey) {
    form.key.value = nextKey; // another order
    nextKey = null;
  }
  sentWith = contents;
  body.key = form.key.value;
  message.className = "";
  message.textContent = "placing the order…";
  let resp;
  try {
    resp = await fetch("/api/orders", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch (e) {
    message.className = "problem";
    message.textContent = "the storefront did not answer: " + e;
    return;
  }
  const answer = await resp.json();
  if (!resp.ok) {
    message.className = "problem";
    const fields = (answer.errors || []).map((f) => f.field + ": " + f.detail).join("; ");
    message.textContent = answer.title + ": " + (fields || answer.detail);
    return;
  }
  if (form.key.value === body.key) {
    nextKey = answer.next_key;
  }
  message.textContent = (answer.replayed ? "the same order again (Idempotent-Replayed): " : "order placed: ") + answer.order.id;
  if (answer.replayed) {
    message.dataset.replayed = answer.order.id; // ordering answered a second send of the key with the first order
  }
  follow(answer.order.id);
});

// follow shows the journey of one order and polls it until it is done.
function follow(id) {
  if (journey.dataset.order === id) {
    return; // a double click: already following this order
  }
  journey.dataset.order = id;
  journey.dataset.done = "false";
  journey.replaceChildren();
  cancelButton.hidden = true;
  cancelMessage.textContent = "";
  cancelMessage.className = "";
  delete cancelMessage.dataset.replayed;
  document.getElementById("journey-order").textContent = id;
  document.getElementById("journey-section").hidden = false;
  watch(id);
}

// watch polls the journey of the order followed, id, until it is done; again after a
// cancellation, which continues a journey that was over.
function watch(id) {
  if (polling) {
    clearTimeout(polling);
  }
  const generation = ++watching; // a tick of an earlier watch, still awaiting, stops
  const tick = async () => {
    polling = null;
    let done = false;
    try {
      const resp = await fetch("/api/orders/" + id + "/journey", { cache: "no-store" });
      if (resp.ok && journey.dataset.order === id && generation === watching) {
        const j = await resp.json();
        render(j);
        done = j.done;
      }
    } catch (e) {
      // the next tick asks again
    }
    if (journey.dataset.order !== id || generation !== watching) {
      return;
    }
    await refreshStock();
    if (!done && journey.dataset.order === id && generation === watching) {
      polling = setTimeout(tick, 200);
    }
  };
  polling = setTimeout(tick, 0);
}

// The Cancel button cancels the order followed through ordering's
// POST /orders/{id}/cancel; the storefront sends one Idempotency-Key per order, so a
// double click is one cancellation. The journey then continues with the compensation.
const cancelButton = document.getElementById("journey-cancel");
const cancelMessage = document.getElementById("cancel-message");
cancelButton.addEventListener("click", async () => {
  const id = journey.dataset.order;
  cancelMessage.className = "";
  cancelMessage.textContent = "cancelling…";
  let resp;
  try {
    resp = await fetch("/api/orders/" + id + "/cancel", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    });
  } catch (e) {
    cancelMessage.className = "problem";
    cancelMessage.textContent = "the storefront did not answer: " + e;
    return;
  }
  const answer = await resp.json();
  if (journey.dataset.order !== id) {
    return;
  }
  if (!resp.ok) {
    cancelMessage.className = "problem";
    cancelMessage.textContent = answer.title + ": " + answer.detail;
    return;
  }
  cancelMessage.textContent = answer.replayed
    ? "the same cancellation again (Idempotent-Replayed)"
    : "order cancelled: watch inventory give its copies back and the second email go";
  if (answer.replayed) {
    cancelMessage.dataset.replayed = id;
  }
  watch(id);
});

function render(j) {
  journey.dataset.status = j.status;
  journey.dataset.done = String(j.done);
  document.getElementById("journey-summary").textContent =
    "status " + j.status + (j.done ? ": the journey is over" : ": watching…");
  // Ordering cancels a pending or confirmed order; a rejected or cancelled one is 409.
  cancelButton.hidden = !(j.status === "pending" || j.status === "confirmed");
  for (const step of j.steps) {
    let li = document.getElementById("step-" + step.key);
    if (!li) {
      li = document.createElement("li");
      li.id = "step-" + step.key;
      li.innerHTML = '<span class="title"></span><span class="at"></span>' +
        '<span class="detail"></span><span class="links"></span>';
      journey.appendChild(li);
    }
    li.className = step.state;
    li.dataset.state = step.state;
    li.querySelector(".title").textContent = step.title;
    li.querySelector(".at").textContent = step.at ? new Date(step.at).toISOString().slice(11, 23) + " UTC" : "";
    li.querySelector(".detail").textContent = step.detail || (step.state === "waiting" ? "waiting…" : "");
    const links = li.querySelector(".links");
    links.replaceChildren(link("source", step.source, "source"));
    if (step.trace) {
      links.appendChild(link("trace in Jaeger", step.trace, "trace"));
    }
  }
}

function link(text, href, cls) {
  const a = document.createElement("a");
  a.textContent = text;
  a.href = href;
  a.className = cls;
  a.target = "_blank";
  a.rel = "noopener";
  return a;
}

async function refreshStock() {
  try {
    const resp = await fetch("/api/books", { cache: "no-store" });
    if (!resp.ok) {
      return;
    }
    for (const b of await resp.json()) {
      const row = document.getElementById("book-" + b.id);
      if (row) {
        row.querySelector(".available").textContent = b.available;
        row.querySelector(".on-hand").textContent = b.on_hand;
        row.querySelector(".reserved").textContent = b.reserved;
      }
    }
  } catch (e) {
    // shown again at the next refresh
  }
}

// The break-it panel, when the storefront runs with STOREFRONT_DEMOS=1.
const ambiguous = document.getElementById("demo-ambiguous");
if (ambiguous) {
  const state = document.getElementById("demo-ambiguous-state");
  const show = (f) => {
    const on = f.ambiguous_rate > 0;
    ambiguous.dataset.on = String(on);
    ambiguous.textContent = on ? "Provider: ambiguous answers off" : "Provider: ambiguous answers on";
    state.textContent = "provider faults now: ambiguous_rate " + f.ambiguous_rate + ", fail_rate " + f.fail_rate + ", latency " + f.latency;
  };
  const problem = async (resp) => {
    const p = await resp.json();
    state.textContent = p.title + ": " + p.detail;
  };
  fetch("/api/demos/faults").then(async (resp) => (resp.ok ? show(await resp.json()) : problem(resp)));
  ambiguous.addEventListener("click", async () => {
    const resp = await fetch("/api/demos/faults", {
      method: "PUT",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ambiguous: ambiguous.dataset.on !== "true" }),
    });
    if (resp.ok) {
      show(await resp.json());
    } else {
      problem(resp);
    }
  });
}

// The relay's pause, when the storefront was given an `ordering relay` process's pid.
const relay = document.getElementById("demo-relay");
if (relay) {
  const state = document.getElementById("demo-relay-state");
  let watching = null;
  const show = (r) => {
    relay.dataset.paused = String(r.paused);
    relay.disabled = r.paused;
    state.textContent = r.paused
      ? "relay stopped (SIGSTOP) until " + new Date(r.until).toISOString().slice(11, 19) + " UTC"
      : "relay running";
    if (r.paused && !watching) {
      watching = setInterval(refresh, 500); // until it says the relay runs again
    } else if (!r.paused && watching) {
      clearInterval(watching);
      watching = null;
    }
  };
  const problem = async (resp) => {
    const p = await resp.json();
    state.textContent = p.title + ": " + p.detail;
  };
  const refresh = () => fetch("/api/demos/relay", { cache: "no-store" })
    .then(async (resp) => (resp.ok ? show(await resp.json()) : problem(resp)))
    .catch(() => {});
  refresh();
  relay.addEventListener("click", async () => {
    const resp = await fetch("/api/demos/relay/pause", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    });
    if (resp.ok) {
      show(await resp.json());
    } else {
      problem(resp);
    }
  });
}
