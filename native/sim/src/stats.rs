//! Statistics of a column of values per group (latency.df_latency_stats, tasks.df_activation_stats),
//! computed with one copy of the values: count, mean, linear-interpolated quantiles, max, sum and the
//! geometric mean of the positive values. The quantiles, counts and maxima equal those of a polars group_by
//! over the same rows; the sums are pairwise (as numpy's and polars') over the sorted values, so means and
//! geometric means agree with polars' to ~1e-15 (relative: the order of the additions differs).

/// Sums below this many values are added in 8 lanes; longer ones are split in two halves.
const PAIRWISE_BLOCK: usize = 128;

/// Pairwise sum: 8 interleaved accumulators up to PAIRWISE_BLOCK values, halves (a multiple of 8 first)
/// above; fewer than 8 values added in order.
pub fn pairwise_sum(v: &[f64]) -> f64 {
    let n = v.len();
    if n < 8 {
        return v.iter().fold(0.0, |s, &x| s + x);
    }
    if n <= PAIRWISE_BLOCK {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&v[..8]);
        let whole = n - n % 8;
        let mut i = 8;
        while i < whole {
            for (k, acc) in r.iter_mut().enumerate() {
                *acc += v[i + k];
            }
            i += 8;
        }
        let mut s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &x in &v[whole..] {
            s += x;
        }
        return s;
    }
    let mut half = n / 2;
    half -= half % 8;
    pairwise_sum(&v[..half]) + pairwise_sum(&v[half..])
}

/// The `q` quantile (0..=1) of sorted values, interpolated linearly between the order statistics around
/// q * (n - 1) (numpy's default, polars' "linear"). `sorted` is not empty.
pub fn linear_quantile(sorted: &[f64], q: f64) -> f64 {
    let idx = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (idx.floor() as usize, idx.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - lo as f64)
}

/// Per group that has rows (ascending group code): its code, first row, count, mean, the `quantiles`
/// (one vector per requested q), max, sum, and the geometric mean of its positive values (NaN when it has
/// none).
#[derive(Default, Debug, PartialEq)]
pub struct GroupStats {
    pub group: Vec<u32>,
    pub first_row: Vec<u32>,
    pub count: Vec<u64>,
    pub mean: Vec<f64>,
    pub quantiles: Vec<Vec<f64>>,
    pub max: Vec<f64>,
    pub sum: Vec<f64>,
    pub gmean: Vec<f64>,
}

/// Statistics of `values` per group (`groups[i]` < `n_groups`: row i's group code). NaN values are not
/// expected (the columns are latencies and durations).
pub fn group_stats(values: &[f64], groups: &[u32], n_groups: usize, quantiles: &[f64]) -> GroupStats {
    assert_eq!(values.len(), groups.len(), "one group code per value");
    let mut start = vec![0usize; n_groups + 1];
    for &g in groups {
        start[g as usize + 1] += 1;
    }
    for g in 0..n_groups {
        start[g + 1] += start[g];
    }
    // the values grouped (a counting sort), and each group's first row
    let mut grouped = vec![0.0f64; values.len()];
    let mut next = start[..n_groups].to_vec();
    let mut first_row = vec![u32::MAX; n_groups];
    for (row, (&v, &g)) in values.iter().zip(groups).enumerate() {
        let g = g as usize;
        if first_row[g] == u32::MAX {
            first_row[g] = row as u32;
        }
        grouped[next[g]] = v;
        next[g] += 1;
    }
    drop(next);
    let mut out = GroupStats { quantiles: vec![Vec::new(); quantiles.len()], ..Default::default() };
    for g in 0..n_groups {
        let part = &mut grouped[start[g]..start[g + 1]];
        if part.is_empty() {
            continue;
        }
        let n = part.len();
        // sorted in place: the quantiles read it, the sums add it in that order (to ~1e-15 of polars' sums in
        // row order), and the logarithms of its positive tail are taken in place (no other copy)
        part.sort_unstable_by(f64::total_cmp);
        let sum = pairwise_sum(part);
        out.group.push(g as u32);
        out.first_row.push(first_row[g]);
        out.count.push(n as u64);
        out.mean.push(sum / n as f64);
        for (k, &q) in quantiles.iter().enumerate() {
            out.quantiles[k].push(linear_quantile(part, q));
        }
        out.max.push(part[n - 1]);
        out.sum.push(sum);
        let first_positive = part.partition_point(|&x| x <= 0.0);
        let positive = &mut part[first_positive..];
        positive.iter_mut().for_each(|x| *x = x.ln());
        out.gmean.push(if positive.is_empty() {
            f64::NAN
        } else {
            (pairwise_sum(positive) / positive.len() as f64).exp()
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_sum_adds_short_and_long_runs() {
        assert_eq!(pairwise_sum(&[]), 0.0);
        assert_eq!(pairwise_sum(&[1.0, 2.0, 3.0]), 6.0);
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(pairwise_sum(&v), 500_500.0);
        // the lanes: 0.1 added in 8 accumulators is not the sequential sum
        let tenths = vec![0.1; 64];
        let lanes = pairwise_sum(&tenths);
        assert!((lanes - 6.4).abs() < 1e-12);
    }

    #[test]
    fn quantiles_interpolate_linearly() {
        let s = [1.0, 2.0, 4.0, 8.0];
        assert_eq!(linear_quantile(&s, 0.0), 1.0);
        assert_eq!(linear_quantile(&s, 1.0), 8.0);
        assert_eq!(linear_quantile(&s, 0.5), 3.0);
        assert_eq!(linear_quantile(&[5.0], 0.99), 5.0);
    }

    #[test]
    fn groups_in_code_order_with_first_rows() {
        let values = [3.0, 10.0, 1.0, 0.0, 2.0];
        let groups = [1, 0, 1, 2, 1];
        let s = group_stats(&values, &groups, 4, &[0.5]);
        assert_eq!(s.group, vec![0, 1, 2]);
        assert_eq!(s.first_row, vec![1, 0, 3]);
        assert_eq!(s.count, vec![1, 3, 1]);
        assert_eq!(s.mean, vec![10.0, 2.0, 0.0]);
        assert_eq!(s.quantiles[0], vec![10.0, 2.0, 0.0]);
        assert_eq!(s.max, vec![10.0, 3.0, 0.0]);
        assert_eq!(s.sum, vec![10.0, 6.0, 0.0]);
        assert!((s.gmean[1] - 6f64.powf(1.0 / 3.0)).abs() < 1e-12);
        assert!(s.gmean[2].is_nan(), "no positive value: no geometric mean");
    }
}
