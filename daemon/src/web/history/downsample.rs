//! Min/max downsampling: the points are cut into equal buckets (by index) and each
//! bucket keeps its lowest and its highest point, in step order. A loss spike or
//! dip survives any zoom level, which averaging or striding would hide.

use lavender_api::Point;

/// The bucket boundaries for `len` points cut into `buckets`: bucket `b` holds
/// indices `bounds(b).0 .. bounds(b).1`.
pub fn bucket_bounds(len: usize, buckets: usize, b: usize) -> (usize, usize) {
    (b * len / buckets, (b + 1) * len / buckets)
}

/// At most `max_points` points (at least 2 are always allowed); the input
/// unchanged when it already fits.
pub fn min_max(points: &[Point], max_points: usize) -> Vec<Point> {
    let max_points = max_points.max(2);
    if points.len() <= max_points {
        return points.to_vec();
    }
    let buckets = max_points / 2;
    let mut out = Vec::with_capacity(buckets * 2);
    for b in 0..buckets {
        let (lo, hi) = bucket_bounds(points.len(), buckets, b);
        let slice = &points[lo..hi];
        let mut min = 0;
        let mut max = 0;
        for (i, p) in slice.iter().enumerate() {
            if p[1] < slice[min][1] {
                min = i;
            }
            if p[1] > slice[max][1] {
                max = i;
            }
        }
        let (first, second) = if min <= max { (min, max) } else { (max, min) };
        out.push(slice[first]);
        if second != first {
            out.push(slice[second]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(n: usize) -> Vec<Point> {
        // Deterministic noise with rare spikes and dips.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let noise = (x % 1000) as f64 / 1000.0;
                let spike = if x.is_multiple_of(997) {
                    50.0
                } else if x.is_multiple_of(991) {
                    -50.0
                } else {
                    0.0
                };
                [
                    i as f64 + 1.0,
                    10.0 / (1.0 + i as f64 / 100.0) + noise + spike,
                ]
            })
            .collect()
    }

    #[test]
    fn small_series_pass_through() {
        let pts = noisy(10);
        assert_eq!(min_max(&pts, 10), pts);
        assert_eq!(min_max(&pts, 1000), pts);
    }

    #[test]
    fn each_bucket_keeps_its_min_and_max_in_step_order() {
        let pts = noisy(200_000);
        for max_points in [2, 3, 100, 1001, 5000] {
            let out = min_max(&pts, max_points);
            assert!(out.len() <= max_points, "{} > {max_points}", out.len());
            assert!(
                out.windows(2).all(|w| w[0][0] < w[1][0]),
                "not in step order"
            );
            let buckets = max_points / 2;
            for b in 0..buckets {
                let (lo, hi) = bucket_bounds(pts.len(), buckets, b);
                let bucket = &pts[lo..hi];
                let min = bucket.iter().map(|p| p[1]).fold(f64::INFINITY, f64::min);
                let max = bucket
                    .iter()
                    .map(|p| p[1])
                    .fold(f64::NEG_INFINITY, f64::max);
                let (x0, x1) = (bucket[0][0], bucket[bucket.len() - 1][0]);
                let kept: Vec<f64> = out
                    .iter()
                    .filter(|p| p[0] >= x0 && p[0] <= x1)
                    .map(|p| p[1])
                    .collect();
                assert!(kept.contains(&min), "bucket {b} lost its min {min}");
                assert!(kept.contains(&max), "bucket {b} lost its max {max}");
            }
        }
    }

    #[test]
    fn a_single_spike_survives() {
        let mut pts: Vec<Point> = (0..100_000).map(|i| [i as f64, 1.0]).collect();
        pts[77_777][1] = 99.0;
        let out = min_max(&pts, 50);
        assert!(out.contains(&[77_777.0, 99.0]));
    }
}
