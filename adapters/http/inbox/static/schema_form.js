// An edit form generated from the tool's argument schema (JSON Schema, as the policy carries
// it): one labelled control per property by its type (text, number, whole number, yes/no, one
// of a list), required ones marked; nested values, and arguments the schema does not describe,
// in a labelled JSON box. Without a usable schema, the whole arguments in one JSON box. The
// service checks the edit against the schema again before recording anything.
import { uid } from "./state.js";
import { visibleJson } from "./text.js";

const SCALAR = new Set(["string", "number", "integer", "boolean"]);

// The one type a property's schema names, or null (several, none, or not a scalar).
function scalarType(property) {
  const type = Array.isArray(property.type)
    ? property.type.filter((t) => t !== "null")
    : [property.type];
  return type.length === 1 && SCALAR.has(type[0]) ? type[0] : null;
}

function usable(schema) {
  return (
    schema !== null &&
    typeof schema === "object" &&
    schema.properties !== null &&
    typeof schema.properties === "object" &&
    !Array.isArray(schema.properties)
  );
}

function labelFor(control, text, required, description) {
  const label = document.createElement("label");
  label.htmlFor = control.id;
  label.textContent = text;
  if (required) {
    const mark = document.createElement("span");
    mark.className = "required";
    mark.textContent = " (required)";
    label.appendChild(mark);
  }
  if (description) {
    const hint = document.createElement("span");
    hint.className = "hint";
    hint.textContent = " — " + description;
    label.appendChild(hint);
  }
  return label;
}

function jsonBox(labelText, value, name) {
  const area = document.createElement("textarea");
  area.id = uid("json");
  area.rows = Math.min(12, Math.max(3, visibleJson(value).split("\n").length + 1));
  area.spellcheck = false;
  area.className = "json-args";
  area.dataset.field = name || "";
  area.value = value === undefined ? "" : visibleJson(value);
  const field = document.createElement("div");
  field.className = "field";
  field.append(labelFor(area, labelText, false, ""), area);
  return field;
}

function control(name, property, value, required) {
  const type = Array.isArray(property.enum) ? "enum" : scalarType(property);
  let input;
  if (type === "enum") {
    input = document.createElement("select");
    if (!required) input.appendChild(new Option("(none)", ""));
    property.enum.forEach((choice, i) => {
      const option = new Option(typeof choice === "string" ? choice : JSON.stringify(choice), String(i));
      option.selected = JSON.stringify(choice) === JSON.stringify(value);
      input.appendChild(option);
    });
  } else if (type === "boolean") {
    input = document.createElement("input");
    input.type = "checkbox";
    input.checked = value === true;
  } else if (type === "number" || type === "integer") {
    input = document.createElement("input");
    input.type = "text"; // the service, not the browser, judges the number: its 422 says why
    input.inputMode = type === "integer" ? "numeric" : "decimal";
    input.value = value === undefined || value === null ? "" : String(value);
  } else if (type === "string") {
    input = document.createElement("input");
    input.type = "text";
    input.value = typeof value === "string" ? value : value === undefined ? "" : String(value);
  } else {
    return jsonBox(name + " (JSON)", value, name);
  }
  input.id = uid("field");
  input.name = name;
  input.dataset.field = name;
  input.dataset.type = type;
  if (required && type !== "boolean") input.required = true;
  const field = document.createElement("div");
  field.className = type === "boolean" ? "field check" : "field";
  const label = labelFor(input, property.title || name, required, property.description);
  if (type === "boolean") field.append(input, label);
  else field.append(label, input);
  return field;
}

// Fills `container` with the controls for `args` under `schema`: the headline fields first,
// then the required ones, then the rest (a stored schema's properties come sorted by name).
export function buildForm(container, schema, args, headline = []) {
  container.replaceChildren();
  if (!usable(schema)) {
    container.appendChild(jsonBox("The arguments to run instead (a JSON object)", args, ""));
    return;
  }
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const described = Object.keys(schema.properties);
  const rank = (name) => {
    const first = headline.indexOf(name);
    return first >= 0 ? first : headline.length + (required.has(name) ? 0 : 1);
  };
  const ordered = [...described].sort((a, b) => rank(a) - rank(b));
  for (const name of ordered) {
    container.appendChild(control(name, schema.properties[name] || {}, args[name], required.has(name)));
  }
  const rest = Object.fromEntries(Object.entries(args).filter(([k]) => !described.includes(k)));
  if (Object.keys(rest).length) {
    container.appendChild(jsonBox("Other arguments (a JSON object)", rest, "*"));
  }
}

// The arguments the form says, or throws an Error naming what is not readable.
export function readForm(container, schema) {
  // No prototype: an argument named `__proto__` is an argument like any other, not a setter
  // that would drop it from what is sent.
  const args = Object.create(null);
  for (const element of container.querySelectorAll("[data-field]")) {
    const name = element.dataset.field;
    if (element.tagName === "TEXTAREA") {
      const text = element.value.trim();
      if (!text) continue;
      let value;
      try {
        value = JSON.parse(text);
      } catch (e) {
        throw new Error((name && name !== "*" ? name + ": " : "") + "not valid JSON: " + e.message);
      }
      if (!name || name === "*") {
        if (value === null || typeof value !== "object" || Array.isArray(value)) {
          throw new Error("the arguments must be a JSON object");
        }
        Object.assign(args, value);
      } else {
        args[name] = value;
      }
      continue;
    }
    const type = element.dataset.type;
    if (type === "boolean") {
      args[name] = element.checked;
    } else if (type === "enum") {
      if (element.value !== "") args[name] = schema.properties[name].enum[Number(element.value)];
    } else if (type === "number" || type === "integer") {
      const text = element.value.trim();
      if (text === "") continue;
      const number = Number(text);
      // Not a number: sent as typed, so the service's check (and its 422) says what is wrong.
      args[name] = text !== "" && Number.isFinite(number) ? number : text;
    } else if (element.value !== "" || element.required) {
      args[name] = element.value;
    }
  }
  return args;
}
