package cluster

// PodReadyAgainStage is a kwok Stage (Options.KwokStages) that does what a
// kubelet does after its node was NotReady: it reports its running pods
// Ready again. The node lifecycle controller marks every pod of a NotReady
// node not Ready; kwok's stock stages make a pod Ready only once, on its
// way from Pending, so after a control-plane crash long enough for nodes to
// go NotReady the pods would stay unready for good, and a PDB over them
// would refuse every eviction.
const PodReadyAgainStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values:
      - 'False'
  delay:
    durationMilliseconds: 1000
  next:
    statusTemplate: |
      conditions:
      - lastProbeTime: null
        lastTransitionTime: {{ Now | Quote }}
        message: ''
        reason: ''
        status: "True"
        type: Ready
`
