#!/bin/bash
# ab.sh ROUNDS: interleaved rounds of the commands in /tmp/s5/ab-cmds (name|command with DIR), prints medians
rounds=$1
declare -A res
while IFS='|' read -r name cmd; do names+=("$name"); cmds+=("$cmd"); done < /tmp/s5/ab-cmds
for r in $(seq $rounds); do
  for i in "${!names[@]}"; do
    d=$(mktemp -d /tmp/s5/out.XXXX)
    c=${cmds[$i]//@D@/$d}
    t0=$(date +%s%N); bash -c "$c" >/dev/null 2>&1; t1=$(date +%s%N)
    if ! (cd $d && sha256sum -c --quiet /tmp/s5/ref-all.sha >/dev/null 2>&1); then echo "BAD ${names[$i]}"; fi
    echo "${names[$i]} $(( (t1-t0)/1000 ))" >> /tmp/s5/ab-out.txt
    rm -rf $d
  done
done
