// Parse LogQL and TraceQL with Grafana's own lezer grammars and validate prometheus-operator
// objects with their generated schemas. Input on stdin, findings on stdout, both JSON:
//   in:  {"logql": [query, ...], "traceql": [query, ...], "crds": [object, ...]}
//   out: {"logql": [[errorOffset, ...], ...], "traceql": [...], "crds": [message|null, ...]}
// An empty error list (or null) means the item is valid.
import { parser as logql } from "@grafana/lezer-logql";
import { parser as traceql } from "@grafana/lezer-traceql";
import * as v1 from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

function syntaxErrors(parser, query) {
  const offsets = [];
  parser.parse(query).iterate({
    enter: (node) => {
      if (node.type.isError) offsets.push(node.from);
    },
  });
  return offsets;
}

function crdError(obj) {
  const Model = obj.apiVersion === "monitoring.coreos.com/v1" ? v1[obj.kind] : undefined;
  if (!Model) return `no model for ${obj.apiVersion} ${obj.kind}`;
  try {
    new Model(obj).validate();
    return null;
  } catch (err) {
    return String(err.message ?? err);
  }
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
process.stdout.write(
  JSON.stringify({
    logql: (input.logql ?? []).map((q) => syntaxErrors(logql, q)),
    traceql: (input.traceql ?? []).map((q) => syntaxErrors(traceql, q)),
    crds: (input.crds ?? []).map(crdError),
  }),
);
