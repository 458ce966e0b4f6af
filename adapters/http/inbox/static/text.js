// Showing the service's data: only ever as text (textContent, text nodes), never as markup,
// and characters that do not show (zero-width, bidi controls, other format and control
// characters) as their escapes.

// Everything that does not show as itself, but an ordinary space and a line break.
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

function escapeOf(ch) {
  const cp = ch.codePointAt(0);
  const hex = cp.toString(16);
  return cp <= 0xffff ? "\\u" + hex.padStart(4, "0") : "\\u{" + hex + "}";
}

// Appends `text` to `element` as text, each invisible character as a marked escape.
export function appendVisible(element, text) {
  let plain = "";
  for (const ch of String(text)) {
    if (ch !== " " && ch !== "\n" && INVISIBLE.test(ch)) {
      if (plain) element.appendChild(document.createTextNode(plain));
      plain = "";
      const mark = document.createElement("span");
      mark.className = "invisible";
      mark.textContent = escapeOf(ch);
      mark.title =
        "a character that does not show: U+" + escapeOf(ch).replace(/\\u\{?|\}/g, "").toUpperCase();
      element.appendChild(mark);
    } else {
      plain += ch;
    }
  }
  if (plain) element.appendChild(document.createTextNode(plain));
}

// JSON text with every invisible character written as its JSON escape (\uXXXX, one per
// UTF-16 unit): the same value, and an editor shows what a textarea would hide.
export function visibleJson(value) {
  let out = "";
  for (const ch of JSON.stringify(value, null, 2)) {
    if (ch !== " " && ch !== "\n" && INVISIBLE.test(ch)) {
      for (let i = 0; i < ch.length; i += 1) {
        out += "\\u" + ch.charCodeAt(i).toString(16).padStart(4, "0");
      }
    } else {
      out += ch;
    }
  }
  return out;
}

export function showText(element, text) {
  element.replaceChildren();
  appendVisible(element, text === null || text === undefined ? "" : text);
}

export function showJson(element, value) {
  element.replaceChildren();
  appendVisible(element, JSON.stringify(value, null, 2));
  element.hidden = false;
}

// A value as a reviewer reads it: text as itself, anything else as JSON.
export function showValue(element, value) {
  showText(element, typeof value === "string" ? value : JSON.stringify(value));
}

// -- times ---------------------------------------------------------------------------------

const ABSOLUTE = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

export function absolute(iso) {
  return ABSOLUTE.format(new Date(iso));
}

// "in 5 min", "3 h ago", "just now": how far `iso` is from now.
export function relative(iso, now = Date.now()) {
  const seconds = Math.round((Date.parse(iso) - now) / 1000);
  const size = Math.abs(seconds);
  if (size < 45) return seconds < 0 || size < 5 ? "just now" : "in " + size + " s";
  const units = [
    [86400, "d"],
    [3600, "h"],
    [60, "min"],
  ];
  for (const [span, name] of units) {
    if (size >= span) {
      const count = Math.round(size / span);
      return seconds < 0 ? count + " " + name + " ago" : "in " + count + " " + name;
    }
  }
  return "in " + Math.round(size / 60) + " min";
}

// `<time datetime>` saying when, relative and absolute: "3 min ago (5 Dec 2026, 10:41)".
export function timeElement(iso) {
  const element = document.createElement("time");
  if (!iso) {
    element.textContent = "—";
    return element;
  }
  element.dateTime = iso;
  element.dataset.relative = "true";
  element.title = new Date(iso).toISOString();
  fillTime(element);
  return element;
}

export function fillTime(element) {
  const iso = element.dateTime;
  element.textContent = relative(iso) + " (" + absolute(iso) + ")";
}

export function showTime(element, iso) {
  element.replaceChildren(timeElement(iso));
}
