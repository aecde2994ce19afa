{{/*
nodeward.labels: the recommended labels. name and component are the
object's (name is also the selector of the DaemonSet and the Deployment, so
its values never change); the others are the release's. managed-by is Helm's
own (kustomize says kustomize): the one label test/helmsync lets differ.
*/}}
{{- define "nodeward.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: nodeward
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
{{- end }}

{{/* nodeward.image: repository:tag, or repository@digest when a digest is set. */}}
{{- define "nodeward.image" -}}
{{- if .image.digest -}}
{{ .image.repository }}@{{ .image.digest }}
{{- else -}}
{{ .image.repository }}:{{ .image.tag | default .appVersion | required "image.tag or image.digest must be set" }}
{{- end -}}
{{- end }}
