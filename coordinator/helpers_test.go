package coordinator_test

import "k8s.io/apimachinery/pkg/util/intstr"

func intstrPercent(s string) intstr.IntOrString { return intstr.FromString(s) }

func intstrInt(n int32) intstr.IntOrString { return intstr.FromInt32(n) }
