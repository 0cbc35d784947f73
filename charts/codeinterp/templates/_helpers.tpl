{{/* The release's full name: the release name, with the chart's when it lacks it. */}}
{{- define "codeinterp.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The server pods' labels; the selector is the first two. */}}
{{- define "codeinterp.selectorLabels" -}}
app.kubernetes.io/name: codeinterp
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "codeinterp.labels" -}}
{{ include "codeinterp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "codeinterp.redisSelectorLabels" -}}
app.kubernetes.io/name: redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "codeinterp.redisLabels" -}}
{{ include "codeinterp.redisSelectorLabels" . }}
app.kubernetes.io/part-of: codeinterp
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "codeinterp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "codeinterp.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "codeinterp.gvisor" -}}
{{- if eq .Values.provider "gvisor" }}true{{ end -}}
{{- end -}}

{{/* Privileged: gvisor with gvisor.privileged; wasm never is. */}}
{{- define "codeinterp.privileged" -}}
{{- if and (include "codeinterp.gvisor" .) .Values.gvisor.privileged }}true{{ end -}}
{{- end -}}

{{- define "codeinterp.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if not $repo -}}
{{- $repo = ternary "codeinterp/extproc-gvisor" "codeinterp/extproc" (eq .Values.provider "gvisor") -}}
{{- end -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The memory tier in MiB (OpenAI's container sizes). */}}
{{- define "codeinterp.tier" -}}
{{- $t := .Values.sandbox.memoryTier -}}
{{- if not $t -}}{{- $t = ternary "4g" "512m" (eq .Values.provider "gvisor") -}}{{- end -}}
{{- $t -}}
{{- end -}}

{{- define "codeinterp.tierMiB" -}}
{{- $mib := dict "512m" 512 "1g" 1024 "4g" 4096 "16g" 16384 "64g" 65536 -}}
{{- $t := include "codeinterp.tier" . -}}
{{- if and (ne .Values.provider "gvisor") (gt (int (index $mib $t)) 4096) -}}
{{- fail (printf "sandbox.memoryTier %s: the wasm provider's interpreters address at most 4GiB (wasm32); use provider gvisor for larger containers" $t) -}}
{{- end -}}
{{- index $mib $t -}}
{{- end -}}

{{- define "codeinterp.maxSessions" -}}
{{- if .Values.sandbox.maxSessions -}}{{ .Values.sandbox.maxSessions }}{{- else -}}{{ ternary 4 8 (eq .Values.provider "gvisor") }}{{- end -}}
{{- end -}}

{{/* Per-worker overhead beside the guest's memory, MiB: the wasm worker
process; runsc, its gofer and the sentry (~90MiB measured) plus slack. */}}
{{- define "codeinterp.overheadMiB" -}}
{{- ternary 256 192 (eq .Values.provider "gvisor") -}}
{{- end -}}

{{/* The resident size of a warm interpreter, MiB: wasm ~70; gVisor ~200
(runsc + gofer + sentry + python with numpy, pandas and matplotlib). */}}
{{- define "codeinterp.warmMiB" -}}
{{- ternary 200 70 (eq .Values.provider "gvisor") -}}
{{- end -}}

{{/* The pod's memory in GiB: every session at the tier's size, the warm
interpreters beside them and the server, rounded up. */}}
{{- define "codeinterp.memoryGiB" -}}
{{- $sessions := int (include "codeinterp.maxSessions" .) -}}
{{- $per := add (int (include "codeinterp.tierMiB" .)) (int (include "codeinterp.overheadMiB" .)) -}}
{{- $warm := mul (int .Values.sandbox.warmWorkers) (int (include "codeinterp.warmMiB" .)) -}}
{{- $mib := add (mul $sessions $per) $warm 256 -}}
{{- div (add $mib 1023) 1024 -}}
{{- end -}}

{{- define "codeinterp.resources" -}}
{{- if .Values.resources -}}
{{- toYaml .Values.resources -}}
{{- else -}}
{{- $mem := printf "%sGi" (include "codeinterp.memoryGiB" .) -}}
requests:
  cpu: {{ ternary "4" "2" (eq .Values.provider "gvisor") | quote }}
  memory: {{ $mem }}
limits:
  memory: {{ $mem }}
{{- end -}}
{{- end -}}

{{- define "codeinterp.modelNamespace" -}}
{{- default .Release.Namespace .Values.model.service.namespace -}}
{{- end -}}

{{/* A Secret's value that the chart generates once: the one already in
the cluster when there is one (lookup; `helm template` and a first
install see none), else a new one. Arguments: ctx, name, key, new. */}}
{{- define "codeinterp.keptSecretValue" -}}
{{- $s := lookup "v1" "Secret" .ctx.Release.Namespace .name -}}
{{- if and $s $s.data (hasKey $s.data .key) -}}
{{- index $s.data .key -}}
{{- else -}}
{{- .new | b64enc -}}
{{- end -}}
{{- end -}}

{{- define "codeinterp.keySecretName" -}}
{{- default (printf "%s-checkpoints" (include "codeinterp.fullname" .)) .Values.checkpoints.key.existingSecret -}}
{{- end -}}

{{- define "codeinterp.redisSecretName" -}}
{{- default (printf "%s-redis" (include "codeinterp.fullname" .)) .Values.redis.auth.existingSecret -}}
{{- end -}}

{{- define "codeinterp.redisHost" -}}
{{- printf "%s-redis.%s.svc.cluster.local" (include "codeinterp.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* A size in MiB as the server's configuration writes it: whole GiB as GiB. */}}
{{- define "codeinterp.size" -}}
{{- if and (ge (int .) 1024) (eq (mod (int .) 1024) 0) -}}{{ div (int .) 1024 }}GiB{{- else -}}{{ . }}MiB{{- end -}}
{{- end -}}

{{/* The Gateway the routes attach to: this chart's (the release's
namespace) or, with gateway.create false, the platform team's. */}}
{{- define "codeinterp.gatewayNamespace" -}}
{{- if .Values.gateway.create -}}
{{- if .Values.gateway.namespace -}}
{{- fail "gateway.namespace is only for gateway.create=false (an existing Gateway): the chart makes its Gateway in the release's namespace" -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- else -}}
{{- default .Release.Namespace .Values.gateway.namespace -}}
{{- end -}}
{{- end -}}

{{/* The routes' parentRef to that Gateway. */}}
{{- define "codeinterp.parentRef" -}}
- name: {{ .Values.gateway.name }}
  {{- $ns := include "codeinterp.gatewayNamespace" . }}
  {{- if ne $ns .Release.Namespace }}
  namespace: {{ $ns }}
  {{- end }}
  {{- with .Values.gateway.sectionName }}
  sectionName: {{ . }}
  {{- end }}
{{- end -}}

{{/* The external model host is an IP address (v4, or v6 with a colon)
rather than a DNS name. */}}
{{- define "codeinterp.modelHostIsIP" -}}
{{- $h := .Values.model.external.host -}}
{{- if or (contains ":" $h) (regexMatch "^[0-9]+(\\.[0-9]+){3}$" $h) }}true{{ end -}}
{{- end -}}

{{/* Checks model.external and returns "true" when the model is outside
the cluster (an Envoy Gateway Backend). */}}
{{- define "codeinterp.modelExternal" -}}
{{- if eq .Values.model.upstream "external" -}}
{{- if not .Values.model.external.host -}}
{{- fail "model.upstream is external: set model.external.host (the model server's DNS name or IP address)" -}}
{{- end -}}
{{- if and (include "codeinterp.modelHostIsIP" .) .Values.model.external.tls -}}
{{- fail (printf "model.external.host %s is an IP address: TLS needs the DNS name its certificate carries; give that name as host, or set model.external.tls=false (plain http inside your network)" .Values.model.external.host) -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* The model's backendRef in an HTTPRoute rule (a list item). */}}
{{- define "codeinterp.modelBackendRef" -}}
{{- if include "codeinterp.modelExternal" . -}}
- group: gateway.envoyproxy.io
  kind: Backend
  name: {{ include "codeinterp.fullname" . }}-model
{{- else -}}
{{- $modelNS := include "codeinterp.modelNamespace" . -}}
- name: {{ .Values.model.service.name }}
  {{- if ne $modelNS .Release.Namespace }}
  namespace: {{ $modelNS }}
  {{- end }}
  port: {{ .Values.model.service.port }}
{{- end -}}
{{- end -}}

{{/* Filters of a rule to the model: an external host named by DNS gets
its own name as Host (virtual-hosted providers route on it, and its TLS
certificate is checked against it). */}}
{{- define "codeinterp.modelFilters" -}}
{{- if and (include "codeinterp.modelExternal" .) (not (include "codeinterp.modelHostIsIP" .)) -}}
filters:
- type: URLRewrite
  urlRewrite:
    hostname: {{ .Values.model.external.host }}
{{- end -}}
{{- end -}}

{{/* The Responses endpoint the server's follow-ups go to: the model
itself, never the Gateway (whose route would run the filter again). */}}
{{- define "codeinterp.upstreamURL" -}}
{{- if include "codeinterp.modelExternal" . -}}
{{- $h := .Values.model.external.host -}}
{{- if contains ":" $h }}{{ $h = printf "[%s]" $h }}{{ end -}}
{{- printf "%s://%s:%d/v1/responses" (ternary "https" "http" .Values.model.external.tls) $h (int .Values.model.external.port) -}}
{{- else -}}
{{- printf "http://%s.%s.svc.cluster.local:%d/v1/responses" .Values.model.service.name (include "codeinterp.modelNamespace" .) (int .Values.model.service.port) -}}
{{- end -}}
{{- end -}}
